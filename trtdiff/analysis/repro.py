"""A repro to hand over: each culprit's subgraph as a standalone ONNX file, with what shows it diverging.

`--save-repro DIR` writes, per culprit, a folder `DIR/N-NODE/` holding what a runtime's
maintainers need to see the culprit for themselves, without the model or trtdiff's pipeline:

- `subgraph.onnx`: the nodes run for the culprit's local error (the culprit alone, or the
  smallest group whose float inputs have a reference value), its inputs fed from outside;
  shape arithmetic is written in as constants, as the whole graph computed it;
- `inputs/NAME.npy` (and `inputs.npz`, keyed by input name): the reference's values of those
  inputs (PyTorch's, recorded while the whole model ran);
- `outputs/BACKEND.npy`: the reference's value of the culprit's output and each backend's
  output of the subgraph alone (ONNX Runtime and the ONNX spec evaluator run again on the
  standalone file; TensorRT's as the comparison ran it);
- `repro.json` (what `trtdiff repro` reads) and a README with the one command that shows the
  divergence: `trtdiff repro FOLDER`, and Polygraphy's (from `polygraphy_inputs.json` and
  `polygraphy_reference.json`, its own formats), written where Polygraphy is installed; where
  the culprit's pair involves OpenVINO, a Python snippet replaying the subgraph in OpenVINO
  (it has no command for it). A runtime that cannot run the subgraph alone (the spec evaluator
  has no DequantizeLinear below opset 19) is a note there, in `repro.json` and in the report.

`DIR` must be new, empty or an earlier repro (`--force` does not change that), checked before
any work. The bundle is written whole or not at all: built in a folder of its own beside `DIR`,
then moved in, in place of the earlier repro's own entries and nothing else.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trtdiff import outputs
from trtdiff.analysis.metrics import compare_tensors
from trtdiff.analysis.repro_files import (
    MANIFEST,
    MARKER,
    README,
    SUBGRAPH,
    culprit_folders,
    inside,
    is_culprit_name,
    load_array,
    manifest_field,
    read_manifest,
)
from trtdiff.analysis.repro_readme import ReproContext, readme, top_readme
from trtdiff.analysis.shadow import PREFIX, submodel, unprefix_subgraphs
from trtdiff.errors import BackendError, OptionError, ReportFileError, first_line
from trtdiff.report import PairMetrics, Thresholds
from trtdiff.source.onnx_graph import typed_inputs

if TYPE_CHECKING:
    import onnx

    from trtdiff.analysis.culprits import LocalRun
    from trtdiff.report import Culprit

OnCulprits = Callable[[Sequence["Culprit"], Sequence["LocalRun"]], None]


def check_repro_dir(directory: str | None) -> None:
    """Refuse, before any work, a folder trtdiff may not fill: a link, a file, a missing parent, a folder it cannot
    write, a non-empty folder that holds no earlier trtdiff repro (`force` does not cover it), or an earlier repro
    holding something in the way of the new bundle (a culprit folder's name its manifest does not list)."""
    if directory is None:
        return
    target = Path(directory)
    there = outputs.found(target)
    if there == "link":
        raise OptionError(
            "is a symbolic link; give the folder itself, so that nothing outside it is written or removed",
            parameter="save_repro",
            value=directory,
        )
    if there == "missing":
        if not target.parent.is_dir():
            raise OptionError(
                f"folder {target.parent} does not exist; create it first", parameter="save_repro", value=directory
            )
        _check_writable(target.parent, directory)
        return
    if there != "folder":
        raise OptionError("is a file; give a folder to create", parameter="save_repro", value=directory)
    _check_writable(target, directory)
    if any(target.iterdir()) and not _ours(target):
        raise OptionError(
            "the folder is not empty and holds no earlier trtdiff repro; choose a new or empty folder",
            parameter="save_repro",
            value=directory,
        )
    in_the_way = _in_the_way(target)
    if in_the_way:
        raise OptionError(
            f"the earlier repro there holds {in_the_way}, which its {MANIFEST} does not list as one of its culprit "
            "folders; remove it or choose a new folder",
            parameter="save_repro",
            value=directory,
        )


def _check_writable(folder: Path, directory: str) -> None:
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OptionError(f"folder {folder} is not writable; choose another", parameter="save_repro", value=directory)


def _ours(target: Path) -> bool:
    try:
        read_manifest(target)
    except ReportFileError:
        return False
    return True


def _in_the_way(top: Path) -> str | None:
    """The first entry of an earlier repro at `top` that a new bundle could not replace (None: none)."""
    if not _ours(top):
        return None
    own = {folder.name for folder in culprit_folders(top, read_manifest(top).get("culprits"))}
    for entry in sorted(top.iterdir()):
        if is_culprit_name(entry.name) and entry.name not in own:
            return entry.name
        if entry.name in (MANIFEST, README) and outputs.found(entry) == "folder":
            return entry.name
    return None


def repro_writer(context: ReproContext, notes: list[str]) -> OnCulprits:
    """A callback for the culprit step: writes the repro folders of the culprits it is given."""

    def write(culprits: Sequence[Culprit], runs: Sequence[LocalRun]) -> None:
        bundle_notes: list[str] = []
        written = write_repros(context, culprits, runs, bundle_notes)
        if written:
            notes.append(f"repro of {len(written)} culprit(s) in {context.directory}: trtdiff repro {written[0]}")
            notes.extend(f"repro: {note} (noted in its README)" for note in dict.fromkeys(bundle_notes))
        else:
            notes.append(f"no culprit to reproduce: nothing written to {context.directory}")

    return write


def write_repros(
    context: ReproContext, culprits: Sequence[Culprit], runs: Sequence[LocalRun], notes: list[str] | None = None
) -> list[Path]:
    """One folder per culprit whose local run is at hand; the folders written (`notes`: what could not be rerun).

    The bundle is written whole or not at all: built in a folder of its own beside the
    directory, then moved in (`_move_in`); a failure on the way leaves the directory as it was.
    """
    if not culprits:
        return []
    top = context.directory
    by_pair = {run.pair: run for run in runs}
    names: list[str] = []
    with outputs.folder_beside(top) as building:
        for number, culprit in enumerate(culprits, start=1):
            run = by_pair.get(culprit.pair)
            if run is None or culprit.tensor not in run.shadow.subgraphs:
                continue
            name = f"{number}-{_slug(culprit.onnx_node)}"
            found = _write_one(building / name, top / name, context, culprit, run)
            if notes is not None:
                notes.extend(found)
            names.append(name)
        manifest = {"kind": MARKER, "culprits": names, "model": context.model}
        (building / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        (building / README).write_text(top_readme(context, culprits, [top / name for name in names]))
        _move_in(building, top)
    return [top / name for name in names]


def _move_in(building: Path, top: Path) -> None:
    """Put the bundle built in `building` at `top`: the folder itself where there is none, else its entries,
    in place of an earlier repro's own (culprit folders, manifest, README) and nothing else.

    An interrupt lets the moves finish (outputs.whole). Until the new manifest is in, the
    manifest there lists the earlier culprit folders and the new ones, so that a process killed
    on the way (SIGKILL) leaves a repro that the next run still recognises and replaces.
    """
    with outputs.whole():
        if outputs.found(top) == "missing":
            os.rename(building, top)
            return
        new = sorted(entry.name for entry in building.iterdir() if entry.name not in (MANIFEST, README))
        earlier = _still_replaceable(top, new, building)
        both = {"kind": MARKER, "culprits": [f.name for f in earlier] + new}
        outputs.write_text(top / MANIFEST, json.dumps(both) + "\n")
        for folder in earlier:
            shutil.rmtree(folder)
        for name in [*new, README, MANIFEST]:  # a link at either file's name is replaced, never followed
            os.replace(building / name, top / name)


def _still_replaceable(top: Path, new: Sequence[str], building: Path) -> list[Path]:
    """The earlier repro's culprit folders at `top`, checked again when the bundle is moved in: OptionError where
    something that appeared during the comparison is in its way (nothing is written then)."""
    ours = _ours(top)
    earlier = culprit_folders(top, read_manifest(top).get("culprits")) if ours else []
    own = {folder.name for folder in earlier}
    blocking = next((name for name in new if name not in own and outputs.found(top / name) != "missing"), None)
    there = sorted(entry.name for entry in top.iterdir() if entry != building)  # it may be built inside `top`
    if not ours and there:
        blocking = there[0]
    blocking = blocking or next((n for n in (MANIFEST, README) if outputs.found(top / n) == "folder"), None)
    if blocking is not None:
        raise OptionError(
            f"{top / blocking} appeared during the comparison, in the way of the new repro; nothing was written: "
            "move it away and compare again",
            parameter="save_repro",
            value=top,
        )
    return earlier


def _write_one(folder: Path, final: Path, context: ReproContext, culprit: Culprit, run: LocalRun) -> list[str]:
    """Write one culprit's folder at `folder` (its README names it as `final`, where it goes); the runtimes that
    could not run the subgraph alone, as notes."""
    import onnx

    graph = context.graph
    model = standalone(submodel(run.shadow, culprit.tensor, graph))
    inputs = {value.name: np.asarray(run.feeds[value.name]) for value in model.graph.input}
    model = typed_inputs(model, inputs)
    output = model.graph.output[0].name
    folder.mkdir(parents=True)
    (folder / "inputs").mkdir()
    (folder / "outputs").mkdir()
    onnx.save(model, str(folder / SUBGRAPH))
    input_files = {}
    for index, (name, value) in enumerate(inputs.items()):
        file = f"inputs/{index}-{_slug(name)}.npy"
        np.save(folder / file, value)
        input_files[name] = file
    savez: Any = np.savez  # numpy's stub types the keywords as its own flags
    savez(folder / "inputs.npz", **inputs)
    reference, candidate = run.diverged.get(culprit.tensor, (None, None))
    outputs_found: dict[str, np.ndarray] = {}
    if candidate is not None:
        outputs_found[culprit.pair.candidate] = np.asarray(candidate)
    notes: list[str] = []
    outputs_found.update(rerun(folder / SUBGRAPH, inputs, output, context.ort_provider, notes))
    output_files = {}
    if reference is not None:
        np.save(folder / "outputs" / "reference.npy", np.asarray(reference))
    for name, value in outputs_found.items():
        file = f"outputs/{_slug(name)}.npy"
        np.save(folder / file, value)
        output_files[name] = file
    manifest: dict[str, Any] = {
        "kind": MARKER,
        "model": context.model,
        "opset": graph.opset,
        "subgraph": SUBGRAPH,
        "nodes": list(culprit.subgraph),
        "culprit": {"onnx_node": culprit.onnx_node, "op_type": culprit.op_type, "module": culprit.module},
        "tensor": culprit.tensor,
        "output": output,
        "pair": str(culprit.pair),
        "verdict": culprit.verdict,
        "advice": culprit.advice,
        "inputs": input_files,
        "reference": {"backend": culprit.pair.reference, "file": "outputs/reference.npy"},
        "outputs": output_files,
        "thresholds": {
            "min_cosine": context.thresholds.min_cosine,
            "rtol": context.thresholds.rtol,
            "max_abs": context.thresholds.max_abs,
        },
        "notes": notes,
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    polygraphy = _polygraphy_files(folder, inputs, output, reference)
    (folder / README).write_text(readme(final, manifest, reference, outputs_found, context, polygraphy))
    return notes


def standalone(model: onnx.ModelProto) -> onnx.ModelProto:
    """The subgraph with trtdiff's shadow prefix taken off every name: the ONNX file's own tensor and node names."""
    for node in model.graph.node:
        node.name = node.name.removeprefix(PREFIX)
        for i, name in enumerate(node.input):
            node.input[i] = name.removeprefix(PREFIX)
        for i, name in enumerate(node.output):
            node.output[i] = name.removeprefix(PREFIX)
        unprefix_subgraphs(node)  # an If's branches read renamed outer names too
    for value in model.graph.output:
        value.name = value.name.removeprefix(PREFIX)
    model.graph.name = "trtdiff-repro"
    return model


def rerun(
    path: Path, inputs: Mapping[str, np.ndarray], output: str, provider: str, notes: list[str]
) -> dict[str, np.ndarray]:
    """The standalone file's output on ONNX Runtime and on the ONNX spec evaluator (the registry's repro
    backends), run here now.

    A runtime that cannot run the subgraph alone (the spec evaluator has no DequantizeLinear
    below opset 19) is a line in `notes`, not an error: the other runtime's output still shows it.
    """
    from trtdiff.backends.registry import open_backend, repro_backends
    from trtdiff.options import BackendOptions
    from trtdiff.source.onnx_graph import load_graph

    graph = load_graph(path)
    found: dict[str, np.ndarray] = {}
    options = BackendOptions(ort_provider=provider)
    for name in repro_backends():
        try:
            with open_backend(name, graph, options) as runner:
                for chunk in runner.run(dict(inputs), [output]):
                    if output in chunk:
                        found[name] = np.asarray(chunk[output])
        except BackendError as error:
            cause = error.render().removeprefix(f"{path}: ")  # where it was run is no part of the reason
            notes.append(f"{name} cannot run the subgraph alone: {first_line(cause)}")
    return found


@dataclass(frozen=True)
class ReproResult:
    """One backend's output of the subgraph alone against the reference's value."""

    backend: str
    metrics: PairMetrics
    rerun: bool  # run again now (True) or as the comparison ran it (False)


def check_repro(
    folder: str | Path, provider: str = "CPUExecutionProvider", notes: list[str] | None = None
) -> list[ReproResult]:
    """Run the repro in `folder` again (ONNX Runtime, the spec evaluator) and compare every output with the reference.

    `folder` is one culprit's folder, or the top folder (its first culprit). A runtime that
    cannot run the subgraph here is a line in `notes`.
    """
    target = Path(folder)
    data = read_manifest(target)
    if "subgraph" not in data:
        folders = culprit_folders(target, data.get("culprits"))
        if not folders:
            raise ReportFileError(f"{target}: this repro holds no culprit folder")
        target = folders[0]
        data = read_manifest(target)
    thresholds = _thresholds(manifest_field(data, "thresholds", dict, target), target)
    inputs = {
        name: load_array(inside(target, file))
        for name, file in manifest_field(data, "inputs", dict, target, files=True).items()
    }
    reference = load_array(inside(target, manifest_field(data, "reference", dict, target).get("file")))
    subgraph, output = inside(target, data.get("subgraph")), manifest_field(data, "output", str, target)
    fresh = rerun(subgraph, inputs, output, provider, [] if notes is None else notes)
    results = [ReproResult(name, compare_tensors(reference, value, thresholds), True) for name, value in fresh.items()]
    for name, file in manifest_field(data, "outputs", dict, target, files=True).items():
        if name not in fresh:
            value = load_array(inside(target, file))
            results.append(ReproResult(name, compare_tensors(reference, value, thresholds), False))
    return results


def _thresholds(saved: Mapping[str, Any], folder: Path) -> Thresholds:
    """The comparison's thresholds as the manifest saved them: numbers (max_abs may be null), nothing else."""

    def number(name: str, optional: bool = False) -> float | None:
        value = saved.get(name)
        if (value is None and optional) or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            return None if value is None else float(value)
        raise ReportFileError(f"{folder / MANIFEST}: thresholds.{name} is not a number: {value!r}")

    min_cosine, rtol = number("min_cosine"), number("rtol")
    assert min_cosine is not None and rtol is not None
    return Thresholds(min_cosine=min_cosine, rtol=rtol, max_abs=number("max_abs", optional=True))


def _polygraphy_files(
    folder: Path, inputs: Mapping[str, np.ndarray], output: str, reference: np.ndarray | None
) -> bool:
    """Polygraphy's own input and reference-output files, where Polygraphy is installed; whether written."""
    if reference is None or importlib.util.find_spec("polygraphy") is None:
        return False
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # its log lines
        from polygraphy.comparator import RunResults
        from polygraphy.comparator.struct import IterationResult
        from polygraphy.json import save_json

        save_json([dict(inputs)], str(folder / "polygraphy_inputs.json"))
        iteration = IterationResult({output: np.asarray(reference)}, runner_name="reference")
        RunResults([("reference", [iteration])]).save(str(folder / "polygraphy_reference.json"))
    return True


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "node"
