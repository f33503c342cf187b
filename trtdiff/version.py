"""trtdiff's version, in one place: the package, its reports and `trtdiff --version` read it here."""

__version__ = "0.1.0"
