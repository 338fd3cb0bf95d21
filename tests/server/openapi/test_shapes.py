"""The loosest schema a set of JSON values shares, as the document infers error
envelopes from what each dialect's `render_error` emits."""

from __future__ import annotations

from jsonschema import Draft202012Validator

from parlance.server.openapi.shapes import inferred


def test_required_keys_are_those_every_value_has_and_types_are_unioned():
    values = [{"error": {"message": "a", "param": None}, "id": 1},
              {"error": {"message": "b", "param": "model", "code": "x"}, "id": 2.5}]
    schema = inferred(values)
    assert schema["required"] == ["error", "id"]
    assert schema["properties"]["id"] == {"type": ["integer", "number"]}
    error = schema["properties"]["error"]
    assert error["required"] == ["message", "param"]
    assert error["properties"]["param"] == {"type": ["null", "string"]}
    assert error["properties"]["code"] == {"type": "string"}
    for value in values:
        Draft202012Validator(schema).validate(value)


def test_a_value_of_another_shape_does_not_fit():
    schema = inferred([{"error": "text"}])
    assert not Draft202012Validator(schema).is_valid({"error": {"message": "text"}})
    assert not Draft202012Validator(schema).is_valid({"detail": "text"})


def test_arrays_describe_their_items_and_booleans_are_not_integers():
    schema = inferred([[True, False], []])
    assert schema == {"type": "array", "items": {"type": "boolean"}}
