"""Experiments run by the pyg-lie CLI (one module per task, with add_arguments/main)."""
