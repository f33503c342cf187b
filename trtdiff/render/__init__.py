"""Renderers: each turns a Report into one format and reads nothing else."""
