"""Engine-neutral parsing of generated text into content, reasoning and tool calls."""
