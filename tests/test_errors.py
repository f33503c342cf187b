"""trtdiff.errors: parameter marks, their rendering as names or flags, and one-line error quotes."""

from __future__ import annotations

import pytest

from trtdiff.errors import (
    BackendError,
    ExportError,
    InputError,
    ModelLoadError,
    ModelRunError,
    OnnxFileError,
    OptionError,
    TrtdiffError,
    describe_error,
    first_line,
    param,
    render_names,
)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def test_param_mark_is_not_the_plain_name_but_renders_as_it() -> None:
    marked = param("input_shapes")
    assert marked != "input_shapes"
    assert "input_shapes" in marked
    assert render_names(f"give {marked} as NxCxHxW", str) == "give input_shapes as NxCxHxW"
    assert render_names(f"give {marked} as NxCxHxW", _flag) == "give --input-shapes as NxCxHxW"


def test_render_names_replaces_every_mark_and_leaves_other_text_alone() -> None:
    text = f"{param('save_onnx')} and {param('force')} conflict; 50% of a_b stays"
    assert render_names(text, _flag) == "--save-onnx and --force conflict; 50% of a_b stays"
    assert render_names("no marks here", _flag) == "no marks here"


def test_str_renders_marks_as_plain_parameter_names() -> None:
    error = OptionError(f"{param('min_cosine')} must be in (0, 1]; got 2")
    assert str(error) == "min_cosine must be in (0, 1]; got 2"
    assert "\x1f" not in str(error)


def test_render_uses_the_name_of_function_for_flags() -> None:
    error = InputError(f"{param('input_shapes')} has 3 entries but the model takes 1 input")
    assert error.render(_flag) == "--input-shapes has 3 entries but the model takes 1 input"
    assert error.render() == str(error) == "input_shapes has 3 entries but the model takes 1 input"


def test_parameter_and_value_prefix_the_message() -> None:
    error = ExportError("the file exists; pass force=True", parameter="save_onnx", value="out.onnx")
    assert str(error) == "save_onnx out.onnx: the file exists; pass force=True"
    assert error.render(_flag) == "--save-onnx out.onnx: the file exists; pass force=True"
    assert (error.parameter, error.value) == ("save_onnx", "out.onnx")


def test_parameter_without_value_prefixes_the_name_only() -> None:
    error = OptionError("needs a GPU", parameter="require")
    assert str(error) == "require: needs a GPU"
    assert error.value is None


def test_falsy_value_is_still_written() -> None:
    assert str(OptionError("must be positive", parameter="seed", value=0)) == "seed 0: must be positive"


def test_no_parameter_leaves_the_message_unchanged() -> None:
    error = BackendError("ONNX Runtime failed")
    assert str(error) == error.template == "ONNX Runtime failed"
    assert error.parameter is None


def test_template_keeps_the_marks_for_quoting_in_another_error() -> None:
    inner = InputError("wrong rank", parameter="input_shapes", value="1x3")
    assert inner.template == f"{param('input_shapes')} 1x3: wrong rank"
    outer = BackendError(f"cannot run: {inner.template}")
    assert outer.render(_flag) == "cannot run: --input-shapes 1x3: wrong rank"
    assert str(outer) == "cannot run: input_shapes 1x3: wrong rank"


@pytest.mark.parametrize(
    "cls", [ModelLoadError, InputError, ExportError, OnnxFileError, BackendError, ModelRunError, OptionError]
)
def test_every_user_error_is_a_trtdiff_error(cls: type[TrtdiffError]) -> None:
    error = cls("x", parameter="opset", value=99)
    assert isinstance(error, TrtdiffError)
    assert error.render(_flag) == "--opset 99: x"


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("one line", 300, "one line"),
        ("\n\n   second   \nthird", 300, "second"),
        ("", 300, ""),
        ("  \n\t\n", 300, ""),
        ("abcdefghij", 10, "abcdefghij"),
        ("abcdefghijk", 10, "abcdefg..."),
    ],
)
def test_first_line(text: str, limit: int, expected: str) -> None:
    assert first_line(text, limit) == expected


def test_first_line_of_an_exception_uses_its_message() -> None:
    assert first_line(RuntimeError("Fail: bad node\n  at line 3")) == "Fail: bad node"


def test_first_line_default_limit_is_300() -> None:
    assert first_line("x" * 300) == "x" * 300
    assert first_line("x" * 301) == "x" * 297 + "..."


def test_describe_error_names_the_type_and_the_first_line() -> None:
    assert describe_error(ValueError("bad shape\ndetails")) == "ValueError: bad shape"
    assert describe_error(KeyError()) == "KeyError"
    assert describe_error(OSError("y" * 50), limit=10) == "OSError: yyyyyyy..."


def test_describe_error_renders_trtdiff_marks_as_names() -> None:
    assert describe_error(OptionError("bad", parameter="rtol")) == "OptionError: rtol: bad"


def test_cause_line_skips_the_torchscript_banner() -> None:
    from trtdiff.errors import cause_line

    text = (
        "The following operation failed in the TorchScript interpreter.\n"
        "Traceback of TorchScript (most recent call last):\n"
        '  File "code/__torch__.py", line 9, in forward\n'
        "RuntimeError: Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [1, 8]\n"
    )
    assert cause_line(RuntimeError(text)).startswith("Expected 3D (unbatched) or 4D")
    assert cause_line(ValueError("plain first line\nmore")) == "plain first line"


def test_export_failures_name_the_op_and_a_fix_that_works() -> None:
    from trtdiff.source.export import export_failure

    unsupported = RuntimeError(
        "Unsupported: ONNX export of operator upsample_bilinear2d, align_corners == True. Please feel free to "
        "request support or submit a pull request on PyTorch GitHub: https://github.com/pytorch/pytorch/issues"
    )
    assert export_failure(unsupported, "torchscript", 10) == (
        f"opset 10 cannot express bilinear align_corners=True (upsample_bilinear2d); use {param('opset')} 11 or higher"
    )
    # No fix is written here: export_onnx tries the other exporter first and says what that did.
    other = RuntimeError("Unsupported: ONNX export of operator grid_sampler, mode bicubic. Please feel free")
    assert export_failure(other, "torchscript", 13) == (
        "the torchscript exporter has no ONNX form of grid_sampler with mode bicubic at opset 13"
    )


def test_a_dynamo_export_failure_quotes_the_innermost_cause_and_the_users_line() -> None:
    from trtdiff.source.export import export_failure

    try:
        try:
            raise ValueError("Could not guard on data-dependent expression Eq(u0, 1)\nmore detail")
        except ValueError as inner:
            raise RuntimeError(
                "Failed to export the model with torch.export. This is step 1/3 of exporting the model to ONNX. "
                "Next steps:\n- Modify the model code\n\nThe following call raised this error:\n"
                '  File "/home/me/model.py", line 4, in forward\n    if x.sum() > 0:\n'
            ) from inner
    except RuntimeError as error:
        message = export_failure(error, "dynamo", 18)
    assert message == (
        "ONNX export with the dynamo exporter at opset 18 failed: "
        "Could not guard on data-dependent expression Eq(u0, 1) (at model.py:4)"
    )
