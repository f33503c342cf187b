"""The house by its seams: imports run one way, and a stage loads only what it uses.

Every import in every module counts (top level, inside a function, under TYPE_CHECKING), read
from the source. The stages, bottom to top, are STAGES; a module may import its own stage (no
circle) or one below it, never one above. Import cost is measured in a fresh interpreter with
`python -X importtime`: no torch where no PyTorch work is done.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import trtdiff

PACKAGE = Path(trtdiff.__file__).parent
STAGES = (
    "errors",
    "version",
    "outputs",  # every file trtdiff is asked to write: a new file renamed over the name
    "options",  # every option declared once; the report records the thresholds and options used
    "report",
    "source",
    "backends",
    "pairing",
    "analysis",
    "gate",
    "pipeline",
    "examples",
    "hypotheses",
    "api",
    "render",
    "cli",
    "__main__",
)
"""Bottom to top; the package's own __init__ (the facade's lazy names) sits above them all."""
# The one circle left for the lead (issue 17, part 1: the CLI's options declared once, flags generated):
# remove it from here when cli/app.py and cli/commands.py no longer import each other.


def _module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imports_of(module: str, source: str, known: set[str], is_package: bool = False) -> set[str]:
    """The package modules `module` imports anywhere in `source` (each resolved to the deepest known module)."""
    found: set[str] = set()
    root = module.split(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module and target.split(".")[0] == root:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    names = _module_names()
    known = set(names)
    return {m: imports_of(m, p.read_text(), known, p.name == "__init__.py") for m, p in names.items()}


def stage(module: str) -> int:
    """The module's place in STAGES (the package itself: above every stage)."""
    parts = module.split(".")
    return len(STAGES) if len(parts) == 1 else STAGES.index(parts[1])


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of two or more modules (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(frozenset(group))
    return found


def test_every_module_belongs_to_a_stage() -> None:
    unplaced = [m for m in _module_names() if m != "trtdiff" and m.split(".")[1] not in STAGES]
    assert unplaced == [], "add the new stage to STAGES (bottom to top) and to docs/design.md's layout"


def test_no_import_climbs_to_a_later_stage() -> None:
    climbing = sorted(
        f"{module} -> {target}"
        for module, targets in _graph().items()
        for target in targets
        if stage(target) > stage(module)
    )
    assert climbing == [], "a type used across stages belongs to the lower stage; inject behaviour from above"


def test_no_import_circles() -> None:
    assert [sorted(c) for c in circles(_graph())] == []


def test_the_walk_counts_lazy_type_checking_and_relative_imports() -> None:
    source = textwrap.dedent(
        """
        from typing import TYPE_CHECKING
        from . import sibling
        if TYPE_CHECKING:
            from pkg.top import Thing
        def later():
            import pkg.low.deep.inner
        """
    )
    known = {"pkg", "pkg.top", "pkg.low", "pkg.low.deep", "pkg.mid.sibling", "pkg.mid.here"}
    assert imports_of("pkg.mid.here", source, known) == {"pkg.top", "pkg.low.deep", "pkg.mid.sibling"}
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [frozenset({"a", "b", "c"})]
    assert stage("trtdiff.pairing.pairs") < stage("trtdiff.analysis.engine") < stage("trtdiff")


def imported_modules(*arguments: str, cwd: Path | None = None) -> tuple[set[str], str]:
    """Run `python -X importtime ARGUMENTS` in a fresh interpreter: the modules it imported, and its importtime log."""
    environment = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *arguments],
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:") and "|" in line]
    return {line.rsplit("|", 1)[1].strip() for line in lines[1:]}, "\n".join(lines)


def who_imported(module: str, log: str) -> list[str]:
    """The chain that imported `module`, innermost first (importtime prints a module after what it imports)."""
    lines = [line.rsplit("|", 1)[1] for line in log.splitlines()[1:]]
    depth = {i: len(name) - len(name.lstrip()) for i, name in enumerate(lines)}
    start = next((i for i, name in enumerate(lines) if name.strip() == module), None)
    if start is None:
        return []
    chain, level = [module], depth[start]
    for i in range(start + 1, len(lines)):
        if depth[i] < level:
            chain.append(lines[i].strip())
            level = depth[i]
    return chain


def _no_torch(*arguments: str, cwd: Path | None = None) -> None:
    modules, log = imported_modules(*arguments, cwd=cwd)
    assert "torch" not in modules, f"torch imported through {' <- '.join(who_imported('torch', log))}"


PAIRING = sorted(m for m in _module_names() if m.startswith("trtdiff.pairing"))
EVALUATOR = {"trtdiff.pairing.evaluate", "trtdiff.pairing.eval_ops", "trtdiff.pairing.eval_shape"}


def test_pairing_imports_torch_only_to_evaluate_an_op() -> None:
    """Every pairing module but the ONNX-node evaluator (PyTorch by nature), the facade and the registry."""
    wanted = [m for m in PAIRING if m not in EVALUATOR]
    assert "trtdiff.pairing.pairs" in wanted and "trtdiff.pairing.derive" in wanted
    _no_torch("-c", f"import {', '.join([*wanted, 'trtdiff.api', 'trtdiff.backends.registry'])}")


def test_the_onnx_graph_imports_no_torch() -> None:
    _no_torch("-c", "import trtdiff.source.onnx_graph")


def test_help_imports_no_torch() -> None:
    _no_torch("-m", "trtdiff", "--help")


@pytest.mark.slow
def test_the_import_check_sees_torch() -> None:
    modules, log = imported_modules("-c", "import trtdiff.pairing.evaluate")
    assert "torch" in modules and who_imported("torch", log)[-1] == "trtdiff.pairing.evaluate"


def _relu_onnx(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


@pytest.mark.slow
def test_comparing_an_onnx_file_imports_no_torch(tmp_path: Path) -> None:
    """Two ONNX backends on an ONNX file: the report's torch version comes from the installed metadata."""
    if _has_gpu_device_nodes():
        pytest.skip("an NVIDIA device is present: torch is imported to name it")
    _relu_onnx(tmp_path / "m.onnx")
    code = "import trtdiff; assert trtdiff.compare('m.onnx', backends=['onnxruntime', 'onnx-reference']).passed"
    _no_torch("-c", code, cwd=tmp_path)


def test_openvino_is_imported_only_where_it_runs() -> None:
    """The backend's modules, the registry and its skip check import no openvino (opt-in costs nothing)."""
    code = (
        "import trtdiff.backends.registry, trtdiff.backends.openvino.runtime, trtdiff.backends.openvino.summary; "
        "from trtdiff.backends.openvino import unavailable; unavailable()"
    )
    modules, log = imported_modules("-c", code)
    assert "openvino" not in modules, f"openvino imported through {' <- '.join(who_imported('openvino', log))}"


def _has_gpu_device_nodes() -> bool:
    return any(Path("/dev").glob("nvidia[0-9]*")) or Path("/dev/dxg").exists()


@pytest.mark.slow
def test_building_an_onnx_file_imports_no_torch(tmp_path: Path) -> None:
    """`trtdiff build model.onnx` on a machine without an NVIDIA device: TensorRT, never torch."""
    import importlib.util

    from trtdiff.backends.tensorrt.importing import MODULE_CANDIDATES

    if not any(importlib.util.find_spec(name) for name in MODULE_CANDIDATES):
        pytest.skip("no TensorRT module installed")
    if _has_gpu_device_nodes():
        pytest.skip("an NVIDIA device is present: torch is imported to describe it")
    _relu_onnx(tmp_path / "m.onnx")
    modules, log = imported_modules("-m", "trtdiff", "build", "m.onnx", cwd=tmp_path)
    assert any(m.split(".")[0] in MODULE_CANDIDATES for m in modules)  # it did build, with TensorRT
    assert "torch" not in modules, f"torch imported through {' <- '.join(who_imported('torch', log))}"


HEAVY = ("torch._dynamo", "torch.distributed.fsdp", "sympy")
"""What a TorchScript comparison never uses, and about three seconds to import."""


def _no_heavy(modules: set[str], log: str) -> None:
    found = [m for m in HEAVY if m in modules]
    assert not found, f"{found[0]} imported through {' <- '.join(who_imported(found[0], log))}"


def test_help_imports_no_dynamo_fsdp_or_sympy() -> None:
    _no_heavy(*imported_modules("-m", "trtdiff", "--help"))


@pytest.mark.slow
def test_comparing_a_torchscript_archive_imports_no_dynamo_fsdp_or_sympy(tmp_path: Path) -> None:
    """Loading, recording (a TorchDispatchMode), the TorchScript exporter, ONNX Runtime and the report: none of them."""
    import torch

    from tests.culprit_models import save_archive, small_cnn

    save_archive(small_cnn(), "1x3x16x16", tmp_path / "m.pt")
    assert "torch._dynamo" in imported_modules("-c", "import torch._dynamo")[0]  # the check sees it
    arguments = ["compare", "m.pt", "--input-shape", "1x3x16x16", "--backends", "torch,onnxruntime"]
    modules, log = imported_modules(
        "-m", "trtdiff", *arguments, "--exporter", "torchscript", "--json", "r.json", cwd=tmp_path
    )
    assert "torch" in modules and (tmp_path / "r.json").is_file()
    _no_heavy(modules, log)
    assert torch.__version__  # the archive was saved by this torch


SHARED_STAGES = ("report", "pairing", "analysis", "pipeline", "hypotheses")
"""The stages that know no runtime by name: they ask the registry (trtdiff.backends.registry) what a backend can do."""
RUNTIME_PACKAGES = (
    "trtdiff.backends.tensorrt",
    "trtdiff.backends.openvino",
    "trtdiff.backends.onnxruntime_backend",
    "trtdiff.backends.onnx_reference",
)
RUNTIME_NAMES = frozenset({"tensorrt", "openvino", "onnxruntime", "onnx-reference"})
"""Every ONNX runtime's registry name ("torch", the reference, is every stage's to name)."""
KNOWS_A_RUNTIME: set[str] = set()  # nothing allowed: a stage that needs a runtime asks the registry


def runtime_knowledge(module: str, source: str, known: set[str], is_package: bool = False) -> list[str]:
    """Where `module` knows a runtime by name: an import of a runtime's own package (anywhere, lazy ones included,
    or as an importlib string), or a string literal that is a runtime's registry name (a comparison, a key, an
    argument)."""
    found = [
        f"{module} imports {target}"
        for target in sorted(imports_of(module, source, known, is_package))
        if target.startswith(RUNTIME_PACKAGES)
    ]
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if node.value in RUNTIME_NAMES:
            found.append(f"{module}:{node.lineno} names {node.value!r}")
        elif node.value.startswith(RUNTIME_PACKAGES):
            found.append(f"{module}:{node.lineno} names {node.value!r}")
    return found


def test_the_shared_stages_know_no_runtime_by_name() -> None:
    """Issue 39 item 3: analysis, pipeline, pairing, report and hypotheses ask a backend's spec what it can do
    (rebuild a rewritten graph, compile, engine settings, ...); none imports a runtime's package or names one."""
    names = _module_names()
    known = set(names)
    found = [
        finding
        for module, path in sorted(names.items())
        if module.count(".") >= 1 and module.split(".")[1] in SHARED_STAGES
        for finding in runtime_knowledge(module, path.read_text(), known, path.name == "__init__.py")
    ]
    assert [f for f in found if f not in KNOWS_A_RUNTIME] == []


def test_the_runtime_check_sees_imports_names_and_comparisons() -> None:
    source = textwrap.dedent(
        """
        import importlib
        def later(backend, backends):
            from trtdiff.backends.tensorrt.settings import engine_settings
            if backend.name == "tensorrt":
                return importlib.import_module("trtdiff.backends.openvino.runtime")
            return backends.get("onnxruntime"), backend.name != "torch"
        """
    )
    known = {"trtdiff.backends.tensorrt", "trtdiff.backends.tensorrt.settings", "trtdiff.analysis.here"}
    assert runtime_knowledge("trtdiff.analysis.here", source, known) == [
        "trtdiff.analysis.here imports trtdiff.backends.tensorrt.settings",
        "trtdiff.analysis.here:5 names 'tensorrt'",
        "trtdiff.analysis.here:6 names 'trtdiff.backends.openvino.runtime'",
        "trtdiff.analysis.here:7 names 'onnxruntime'",
    ]
