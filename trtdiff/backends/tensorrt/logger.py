"""One logger for every TensorRT builder, parser and runtime of the process.

TensorRT keeps a process-wide logger: the first one given to a Builder or Runtime is the one
`getLogger()` returns, and full TensorRT warns ("The logger passed into createInferRuntime
differs from one already provided ...") each time another is passed. So every builder and
runtime here shares `shared_logger(trt)`. It keeps errors and warnings (so TensorRT's messages
end up in our errors, not on stderr); each step that reads them clears them first (`step()`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, cast

from trtdiff.backends.tensorrt.api import EnumNamespace, member

if TYPE_CHECKING:
    from trtdiff.backends.tensorrt.api import EnumValue, Logger, TrtModule

TRT_API = ("ILogger", "ILogger.log", "ILogger.Severity")
TRT_OPTIONAL_API: tuple[str, ...] = ()
_KEPT = 200  # messages of each kind kept per step: a failing build can log thousands

# Module-level on purpose, the one mutable global in trtdiff: TensorRT itself keeps one logger per
# process (the first one a Builder or Runtime is given), so one collecting logger per TensorRT module
# mirrors state TensorRT already holds; its messages are cleared by each step that reads them (`step`).
_LOGGERS: dict[str, Logger] = {}


class MessageLog:
    """Errors and warnings TensorRT logged since the last `clear()` (the logic of the logger)."""

    def __init__(self, error: frozenset[EnumValue], warning: frozenset[EnumValue]) -> None:
        self.error_levels, self.warning_levels = error, warning
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def log(self, severity: EnumValue, msg: str) -> None:
        if severity in self.error_levels and len(self.errors) < _KEPT:
            self.errors.append(msg)
        elif severity in self.warning_levels and len(self.warnings) < _KEPT:
            self.warnings.append(msg)

    def clear(self) -> None:
        self.errors.clear()
        self.warnings.clear()


def shared_logger(trt: TrtModule) -> Logger:
    """The one collecting ILogger for this TensorRT module (made on first use)."""
    logger = _LOGGERS.get(trt.__name__)
    if logger is None:
        logger = _make(trt)
        _LOGGERS[trt.__name__] = logger
    return logger


@contextmanager
def step(logger: Logger) -> Iterator[Logger]:
    """Clear the logger's messages, so what a step's error quotes was logged by that step."""
    logger.errors.clear()
    logger.warnings.clear()
    yield logger


def _make(trt: TrtModule) -> Logger:
    """An instance of an `ILogger` subclass whose `log` keeps errors and warnings."""
    severity = cast(EnumNamespace, getattr(trt.ILogger, "Severity"))  # noqa: B009 -- not on `type` for mypy
    errors = frozenset(v for v in (member(severity, "ERROR"), member(severity, "INTERNAL_ERROR")) if v is not None)
    warnings = frozenset(v for v in (member(severity, "WARNING"),) if v is not None)
    base = trt.ILogger

    class CollectingLogger(base):  # type: ignore[misc,valid-type]  # TensorRT's class, chosen at run time
        def __init__(self) -> None:
            super().__init__()
            self.messages = MessageLog(errors, warnings)
            self.errors = self.messages.errors
            self.warnings = self.messages.warnings

        def log(self, severity: EnumValue, msg: str) -> None:
            self.messages.log(severity, msg)

    return cast("Logger", CollectingLogger())
