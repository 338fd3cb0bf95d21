"""Reading a request body: the size limit, strict JSON decoding, parsing big bodies off the loop."""
