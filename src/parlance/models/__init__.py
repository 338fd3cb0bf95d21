"""Which models exist (registry of ids, aliases, files, presets) and which are served."""
