"""The stages wired together: prepare (load, inputs, capture, export, open backends), one
comparison, a build without running, a recording of one backend.

Takes `CompareOptions` and a model; hands on a `Report`, a `BuildReport` or a recording file."""
