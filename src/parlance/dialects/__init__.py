"""One module per API: parse a body into a core request, encode core events into
frames, render the final result and errors. Pure translation, no I/O."""
