"""What a decode step costs by its shape, and how llama.cpp splits a batch over KV
streams into ubatches (`llama_batch_allocr::split_equal`, sequential)."""

from __future__ import annotations

import pytest

from parlance.engines.llamacpp.step_cost import StepCost, ubatches


def test_a_ubatch_takes_consecutive_sequences_the_same_number_of_rows_of_each():
    assert ubatches([0, 1, 2], [1, 1, 1]) == [3]
    assert ubatches([0, 1, 2], [1, 5, 1]) == [3, 4]  # one row each, then the rest alone
    assert ubatches([0, 1, 2], [2, 1, 2]) == [3, 1, 1]  # slot 1 done: 0 and 2 not adjacent
    assert ubatches([0, 1, 2, 3], [3, 3, 1, 1]) == [4, 4]


def test_a_gap_in_the_slots_makes_another_ubatch():
    assert ubatches([0, 2], [1, 1]) == [1, 1]
    assert ubatches([0, 1, 3, 4], [2, 2, 2, 2]) == [4, 4]


def test_one_row_is_the_unit_a_second_costs_a_whole_one_and_more_rows_less_each():
    cost = StepCost(first_two=2.0, per_row=0.5)
    assert cost(1) == 1.0
    assert cost(2) == 2.0
    assert cost(10) == pytest.approx(6.0)


def test_a_batch_costs_its_ubatches_unless_one_stream_takes_it_whole():
    cost = StepCost(first_two=2.0, per_row=0.5)
    assert cost.batch([0, 1], [1, 5]) == pytest.approx(cost(2) + cost(4))
    assert cost.batch([0, 1], [3, 3]) == pytest.approx(cost(6))
    assert cost.batch([0, 1], [1, 5], unified=True) == pytest.approx(cost(6))
