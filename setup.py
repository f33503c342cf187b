"""The one compiled part of trtdiff: the comparison kernel (trtdiff/analysis/_kernel.c), built where a C compiler is.

Everything else is in pyproject.toml. The kernel is plain C loaded with ctypes, not a Python
extension; without a compiler the install still succeeds and trtdiff compares with numpy alone
(the same figures, about two to three times slower: trtdiff.analysis.metrics).
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that warns, instead of failing the install, when the kernel cannot be compiled."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:  # noqa: BLE001 - no compiler at all (setuptools raises its own types)
            _skipped(error)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as error:  # noqa: BLE001 - the compiler failed on this platform
            _skipped(error)

    def get_export_symbols(self, ext: Extension) -> list[str]:
        return []  # plain C read with ctypes: no PyInit_ function to export


def _skipped(error: Exception) -> None:
    print(f"trtdiff: the comparison kernel was not compiled ({error}); numpy compares instead", file=sys.stderr)


setup(
    ext_modules=[
        Extension(
            "trtdiff.analysis._kernel",
            ["trtdiff/analysis/_kernel.c"],
            extra_compile_args=["-O3"] if sys.platform != "win32" else ["/O2"],
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
