"""Load the model the user named: a file of one of the formats torch and ONNX write, or a factory.

The format is told from the file's content, not its extension: `torch.jit.save`, `torch.save`
and `torch.export.save` all write zip archives, told apart by their member names. Pickled
modules run code when loaded, so they need an explicit `trust`.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import warnings
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from trtdiff.errors import ModelLoadError, OptionError, describe_error, param
from trtdiff.source.factories import (
    FACTORY_RE,
    build_with_state_dict,
    call_factory,
    cwd_on_path,
    few,
    is_exported_program,
)

if TYPE_CHECKING:
    import torch

_FORMATS_HINT = (
    "give a path to a TorchScript, ExportedProgram, torch.save or .onnx file, or a factory spec pkg.module:function"
)
_CHECKPOINT_KEYS = ("state_dict", "model_state_dict", "model", "net")


@dataclass(frozen=True)
class LoadedModel:
    """A loaded model, what it was loaded from, and the names of its tensor inputs."""

    kind: str  # "eager" | "torchscript" | "exported_program" | "onnx"
    source: str
    module: torch.nn.Module | None
    exported_program: torch.export.ExportedProgram | None = None
    onnx_path: Path | None = None
    input_names: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def load_model(spec: str, *, model_class: str | None = None, trust: bool = False) -> LoadedModel:
    """Load `spec` (a file or a `pkg.mod:factory` spec); raise ModelLoadError saying what to fix."""
    path = Path(spec)
    if not path.exists():
        if ":" in spec:
            if not FACTORY_RE.match(spec):
                raise ModelLoadError(
                    f"{spec}: no such file, and not a factory spec of the form pkg.module:function; {_FORMATS_HINT}"
                )
            _refuse_model_class(spec, model_class, "a factory spec")
            return _from_object(spec, call_factory(spec, label=spec))
        raise ModelLoadError(f"{spec}: no such file; {_FORMATS_HINT}")
    if path.is_dir():
        raise ModelLoadError(f"{spec}: is a directory, not a model file; {_FORMATS_HINT}")
    fmt = _detect_format(spec, path)
    if fmt == "torchscript":
        _refuse_model_class(spec, model_class, "a TorchScript archive")
        return _load_torchscript(spec, path)
    if fmt == "exported_program":
        _refuse_model_class(spec, model_class, "an ExportedProgram archive")
        return _load_exported_program(spec, path)
    if fmt == "onnx":
        _refuse_model_class(spec, model_class, "an ONNX file")
        return _load_onnx(spec, path)
    return _load_torch_save(spec, path, model_class=model_class, trust=trust)


def _refuse_model_class(spec: str, model_class: str | None, what: str) -> None:
    """`model_class` only applies to state_dicts; silently ignoring it would hide a mix-up."""
    if model_class is not None:
        raise OptionError(
            f"{spec} is {what}, which holds its own model; drop {param('model_class')}",
            parameter="model_class",
            value=model_class,
        )


def _detect_format(spec: str, path: Path) -> str:
    """'torchscript' | 'exported_program' | 'torch_save' | 'onnx', from the file's bytes."""
    try:
        with path.open("rb") as f:
            head = f.read(8)
    except OSError as e:
        raise ModelLoadError(f"{spec}: cannot be read ({describe_error(e)}); check its permissions") from None
    if not head:
        raise ModelLoadError(f"{spec}: the file is empty; save the model again ({_FORMATS_HINT})")
    if head.startswith(b"PK"):
        return _detect_zip(spec, path)
    if head[0] == 0x80 and 2 <= head[1] <= 5:
        return "torch_save"  # the legacy (non-zip) torch.save format is a series of pickles
    if path.suffix.lower() == ".onnx" or head[0] == 0x08:
        return "onnx"  # ModelProto's first field is ir_version (field 1, varint): tag byte 0x08
    raise ModelLoadError(
        f"{spec}: not a format trtdiff knows (neither a zip archive, a pickle nor ONNX protobuf); {_FORMATS_HINT}"
    )


def _detect_zip(spec: str, path: Path) -> str:
    """Tell torch's zip archives apart by member names (each under one top-level folder)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            format_members = [n for n in names if n == "archive_format" or n.endswith("/archive_format")]
            archive_format = archive.read(format_members[0]).strip() if format_members else b""
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise ModelLoadError(
            f"{spec}: a truncated or corrupt zip archive ({describe_error(e)}); save or copy the model again"
        ) from None
    inner = [n.split("/", 1)[1] if "/" in n else n for n in names]
    if archive_format == b"pt2" or any("serialized_exported_program" in n for n in inner):
        return "exported_program"
    if any(n.startswith("code/") for n in inner) and "constants.pkl" in inner:
        return "torchscript"
    if "data.pkl" in inner:
        return "torch_save"
    raise ModelLoadError(
        f"{spec}: a zip archive, but not one that torch.jit.save, torch.save or torch.export.save writes; "
        f"{_FORMATS_HINT}"
    )


def _load_torchscript(spec: str, path: Path) -> LoadedModel:
    import torch

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"`torch\.jit\.load` is deprecated", category=DeprecationWarning)
            with _opened(path) as source:
                module = torch.jit.load(source, map_location="cpu")
    except Exception as e:  # noqa: BLE001 -- a damaged archive can fail in many ways inside the C++ reader
        raise ModelLoadError(
            f"{spec}: cannot load this TorchScript archive ({describe_error(e)}); save it again with torch.jit.save"
        ) from None
    return _from_object(spec, module)


def _load_exported_program(spec: str, path: Path) -> LoadedModel:
    import torch

    try:
        with _opened(path) as source:
            program = torch.export.load(source)
    except Exception as e:  # noqa: BLE001 -- deserialization errors come from many layers
        raise ModelLoadError(
            f"{spec}: cannot load this ExportedProgram ({describe_error(e)}); "
            "save it again with torch.export.save from this torch version"
        ) from None
    return _from_object(spec, program)


def _load_onnx(spec: str, path: Path) -> LoadedModel:
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 -- protobuf DecodeError and friends
        raise ModelLoadError(
            f"{spec}: not a readable ONNX file ({describe_error(e)}); export the model to ONNX again"
        ) from None
    if not model.HasField("graph") or not model.graph.node:
        raise ModelLoadError(f"{spec}: parses as protobuf but holds no ONNX graph; {_FORMATS_HINT}")
    notes: tuple[str, ...] = ()
    try:
        onnx.checker.check_model(str(path) if utf8_path(path) else model)  # its C++ reads only UTF-8 paths
    except Exception as e:  # noqa: BLE001 -- ValidationError, or missing external data files
        # A note, not a refusal: the runtimes decide what they can run (ONNX Runtime's refusal is the error).
        notes = (f"the ONNX checker has a finding on {path.name}: {describe_error(e)}",)
    initializers = {init.name for init in model.graph.initializer}
    names = tuple(i.name for i in model.graph.input if i.name not in initializers)
    return LoadedModel(kind="onnx", source=spec, module=None, onnx_path=path, input_names=names, notes=notes)


def utf8_path(path: str | Path) -> bool:
    """Whether `path` is valid UTF-8: the only paths torch's and TensorRT's C++ readers take.

    A name with other bytes (Latin-1 from an old archive, say) arrives from the command line
    with surrogates in place of those bytes; Python's own file functions open it as it is.
    """
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[str | IO[bytes]]:
    """`path` as torch's loaders take it: the path, or an open file where it is not UTF-8."""
    if utf8_path(path):
        yield str(path)
        return
    with path.open("rb") as file:
        yield file


def _load_torch_save(spec: str, path: Path, *, model_class: str | None, trust: bool) -> LoadedModel:
    """A torch.save file: a state_dict (safe to read) or a pickled module (needs `trust`)."""
    import pickle

    import torch

    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if "weights only load failed" not in str(e).lower():
            raise ModelLoadError(
                f"{spec}: a corrupt or truncated torch.save file ({describe_error(e)}); save it again"
            ) from None
        if not trust:
            found = _pickled_globals(path)
            refs = f" (it references {few(found)})" if found else ""
            raise ModelLoadError(
                f"{spec}: a pickled module or object, not a plain state_dict{refs}; "
                "loading it runs code from the file; "
                f"pass {param('trust')} if you trust it, or save model.state_dict() and use "
                f"{param('model_class')} pkg.mod:Class"
            ) from None
        obj = _load_trusted(spec, path)
    except Exception as e:  # noqa: BLE001 -- truncated zips and bad pickles surface as RuntimeError, EOFError, ...
        raise ModelLoadError(
            f"{spec}: a corrupt or truncated torch.save file ({describe_error(e)}); save it again"
        ) from None

    if isinstance(obj, torch.nn.Module):
        _refuse_model_class(spec, model_class, "a pickled module")
        return _from_object(spec, obj)
    if isinstance(obj, Mapping):
        for key in _CHECKPOINT_KEYS:
            if isinstance(obj.get(key), torch.nn.Module):
                _refuse_model_class(spec, model_class, f"a checkpoint holding a pickled module under {key!r}")
                return _from_object(spec, obj[key])
    state_dict = _find_state_dict(obj)
    if state_dict is None:
        raise ModelLoadError(f"{spec}: holds {_describe(obj)}, not a model or a state_dict; {_FORMATS_HINT}")
    if model_class is None:
        raise ModelLoadError(
            f"{spec}: a state_dict holds weights but no model; "
            f"pass {param('model_class')} pkg.mod:Class to build the model it belongs to"
        )
    return _from_object(spec, build_with_state_dict(spec, model_class, state_dict))


def _load_trusted(spec: str, path: Path) -> Any:
    """Unpickle with code execution; the classes it names must be importable from here."""
    import torch

    try:
        with cwd_on_path():
            return torch.load(str(path), map_location="cpu", weights_only=False)
    except (ImportError, AttributeError) as e:
        raise ModelLoadError(
            f"{spec}: unpickling needs code that cannot be imported ({describe_error(e)}); "
            f"run from the directory where the model's code is importable, or save a state_dict and use "
            f"{param('model_class')}"
        ) from None
    except Exception as e:  # noqa: BLE001 -- the file's own code may raise anything
        raise ModelLoadError(
            f"{spec}: unpickling failed ({describe_error(e)}); save the model again or save a state_dict"
        ) from None


def _pickled_globals(path: Path) -> list[str]:
    """Classes and functions a torch.save pickle names, read without running it (best effort)."""
    import pickletools

    found: list[str] = []
    try:
        with contextlib.ExitStack() as stack:
            if zipfile.is_zipfile(path):
                archive = stack.enter_context(zipfile.ZipFile(path))
                stream = stack.enter_context(
                    archive.open(next(n for n in archive.namelist() if n.endswith("data.pkl")))
                )
                pickles = 1
            else:
                stream, pickles = stack.enter_context(path.open("rb")), 4  # magic, protocol, sys info, the object
            for _ in range(pickles):
                strings: list[str] = []
                for op, arg, _pos in pickletools.genops(stream):
                    if op.name == "GLOBAL":
                        found.append(str(arg).replace(" ", "."))
                    elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                        found.append(f"{strings[-2]}.{strings[-1]}")
                    elif isinstance(arg, str):
                        strings.append(arg)
    except Exception:  # noqa: BLE001 -- only used to word an error message
        pass
    plumbing = (
        "torch._utils.",
        "torch.storage.",
        "collections.OrderedDict",
        "builtins.",
        "__builtin__.",
        "torch.serialization.",
    )
    return [n for n in dict.fromkeys(found) if not n.startswith(plumbing) and not n.endswith("Storage")]


def _find_state_dict(obj: Any) -> Mapping[str, Any] | None:
    """The state_dict itself, or the one inside a training checkpoint; None if there is none."""
    if _is_state_dict(obj):
        found: Mapping[str, Any] = obj
        return found
    if isinstance(obj, Mapping):
        for key in _CHECKPOINT_KEYS:
            inner: Mapping[str, Any] | None = obj.get(key)
            if inner is not None and _is_state_dict(inner):
                return dict(inner)
    return None


def _is_state_dict(obj: Any) -> bool:
    import torch

    return (
        isinstance(obj, Mapping)
        and len(obj) > 0
        and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items())
    )


def _describe(obj: Any) -> str:
    """A few words on what an unexpected object is, e.g. 'a dict with keys epoch, optimizer'."""
    if isinstance(obj, Mapping):
        keys = ", ".join(str(k) for k in list(obj)[:5]) + (", ..." if len(obj) > 5 else "")
        return f"a dict with keys {keys}" if obj else "an empty dict"
    return f"a {type(obj).__name__}"


def from_module(obj: Any, source: str = "<in-memory model>") -> LoadedModel:
    """Wrap a model the caller already has (nn.Module, ScriptModule or ExportedProgram)."""
    import torch

    if not isinstance(obj, torch.nn.Module) and not is_exported_program(obj):
        raise ModelLoadError(
            f"{source}: an object of type {type(obj).__name__} is not a model; "
            "pass an nn.Module, ScriptModule or ExportedProgram"
        )
    return _from_object(source, obj)


def _from_object(spec: str, obj: Any) -> LoadedModel:
    """Wrap a loaded module or program in eval mode, with its input names."""
    import torch

    if is_exported_program(obj):
        _refuse_training_graph(spec, obj)
        names = tuple(
            s.arg.name
            for s in obj.graph_signature.input_specs
            if s.kind == torch.export.graph_signature.InputKind.USER_INPUT
            and isinstance(s.arg, torch.export.graph_signature.TensorArgument)
        )
        # The program's train/eval behaviour was fixed at export time; its module() refuses .eval().
        return LoadedModel(
            kind="exported_program", source=spec, module=obj.module(), exported_program=obj, input_names=names
        )
    obj.eval()
    if isinstance(obj, torch.jit.ScriptModule):
        return LoadedModel(kind="torchscript", source=spec, module=obj, input_names=_script_input_names(obj))
    return LoadedModel(kind="eager", source=spec, module=obj, input_names=_eager_input_names(obj))


def _refuse_training_graph(spec: str, program: torch.export.ExportedProgram) -> None:
    """A program exported in training mode uses batch statistics and dropout: not comparable."""
    import torch

    aten = torch.ops.aten
    training_arg = {
        aten.batch_norm.default: 5,
        aten._native_batch_norm_legit.default: 5,
        aten._native_batch_norm_legit_functional.default: 5,
        aten.dropout.default: 2,
        aten.native_dropout.default: 2,
    }
    for node in program.graph.nodes:
        index = training_arg.get(node.target)
        if index is not None and len(node.args) > index and node.args[index] is True:
            op = str(node.target).split(".")[1].strip("_")
            raise ModelLoadError(
                f"{spec}: the program was exported in training mode ({op} with training=True); "
                "call model.eval() before torch.export.export"
            )


def _eager_input_names(module: torch.nn.Module) -> tuple[str, ...]:
    """forward's parameters without defaults, skipping *args/**kwargs (optional ones stay unset)."""
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return ()
    skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return tuple(
        p.name for p in params if p.kind not in skip and p.name != "self" and p.default is inspect.Parameter.empty
    )


def _script_input_names(module: torch.jit.ScriptModule) -> tuple[str, ...]:
    """forward's schema arguments after self, without those that have defaults."""
    forward: Any = module.forward  # a ScriptMethod, which torch's stubs type as a plain callable
    try:
        arguments = forward.schema.arguments
    except (AttributeError, RuntimeError):
        return ()
    return tuple(a.name for a in arguments[1:] if not a.has_default_value())
