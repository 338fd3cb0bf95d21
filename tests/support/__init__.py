"""What the tests share and never test themselves: apps over the fake engine, the real
engine's helpers, contract checkers for each API's wire format, servers on loopback
(MCP, model origins, upstream replicas, `parlance serve` processes), golden transcripts
and the fixtures plugin. Test modules import from here, never from one another."""
