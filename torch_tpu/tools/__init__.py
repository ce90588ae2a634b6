"""Developer tools (run with `python -m torch_tpu.tools.<name>`)."""
