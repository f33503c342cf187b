"""The `trtdiff` command: flags parsed into typed options, one library call, one line per error."""

from trtdiff.cli.app import main as main
