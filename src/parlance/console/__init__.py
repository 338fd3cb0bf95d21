"""The terminal side of Parlance: `parlance chat` and the model commands (`ps`, `load`,
`unload`, `pull`, `models --url`), each a client of a server's HTTP API, as any other
client is; and how a model's load progress is shown on a terminal."""
