"""Following a copy through the model's edits, without a model: the cursor, the run it
has held for, where the source picks up after a departure, and the edits drafts repeat."""

from __future__ import annotations

from parlance.engines.llamacpp.copying import CONFIRM, MAX_EDIT, MIN_RUN, Copy, Cursor

# A source with a two-token name (7, 8) said three times; the copy renames it to 99.
SOURCE = [1, 2, 3, 7, 8, 4, 5, 6, 10, 11, 12, 7, 8, 13, 14, 15, 16, 17, 7, 8, 18, 19, 20]
PROMPT = [*SOURCE, 0]  # then the answer


def following(answer: list[int]) -> tuple[Copy, list[int]]:
    """A copy started at the source's beginning, having followed `answer`."""
    copy = Copy()
    copy.follow(PROMPT)
    copy.start(0, MIN_RUN)  # as if a lookup had found a long match there
    context = [*PROMPT, *answer]
    copy.follow(context)
    return copy, context


def test_the_cursor_advances_while_the_context_agrees_with_the_source():
    copy, context = following(SOURCE[:3])
    assert copy.cursor == Cursor(3)
    assert copy.run == MIN_RUN + 3
    assert copy.draft(context, 4) == SOURCE[3:7]


def test_after_a_rename_the_copy_goes_on_past_the_old_name_and_drafts_the_new_one():
    """The model wrote 99 where the source said 7 8: once its next tokens (4 5) are found
    just past the old name, the copy goes on there, and its draft says 99 where the
    source says 7 8 again."""
    assert CONFIRM == 2  # the examples below confirm with two tokens
    copy, context = following([1, 2, 3, 99, 4])  # departed: 99 instead of 7
    assert copy.cursor is None
    context.append(5)
    copy.follow(context)
    assert copy.cursor == Cursor(7)
    assert copy.edits == {(7, 8): (99,)}
    assert copy.run == MIN_RUN + 3 + CONFIRM  # the run goes on through the edit
    assert copy.draft(context, 8) == [6, 10, 11, 12, 99, 13, 14, 15]
    # Following the renamed copy keeps the cursor on the source.
    context += [6, 10, 11, 12, 99, 13]
    copy.follow(context)
    assert copy.cursor == Cursor(14)
    assert copy.draft(context, 7) == [14, 15, 16, 17, 99, 18, 19]


def test_an_edit_to_a_longer_replacement_is_drafted_whole():
    copy, context = following([1, 2, 3, 97, 98, 4, 5])  # 7 8 → 97 98
    assert copy.edits == {(7, 8): (97, 98)}
    assert copy.draft(context, 8) == [6, 10, 11, 12, 97, 98, 13, 14]


def test_an_edit_the_model_does_not_repeat_is_forgotten_and_the_copy_goes_on():
    copy, context = following([1, 2, 3, 99, 4, 5])
    assert copy.edits == {(7, 8): (99,)}
    # The second time the model keeps the old name: the edit is forgotten, the source
    # followed as it is.
    context += [6, 10, 11, 12, 7, 8]
    copy.follow(context)
    assert copy.edits == {}
    assert copy.cursor == Cursor(13)
    assert copy.draft(context, 3) == [13, 14, 15]


def test_a_short_copy_that_breaks_is_not_picked_up_again():
    copy = Copy()
    copy.follow(PROMPT)
    copy.start(0, 1)
    context = [*PROMPT, 1, 2, 99, 4]  # a run of 3, then its own words
    copy.follow(context)
    assert copy.cursor is None
    assert copy.edits == {}


def test_a_departure_for_good_stops_looking_for_the_source():
    copy, context = following([1, 2, 3])
    context += [90 + k for k in range(MAX_EDIT + CONFIRM + 1)]
    copy.follow(context)
    assert copy.cursor is None
    context += [4, 5, 6]  # the source's words, too late: a lookup's business now
    copy.follow(context)
    assert copy.cursor is None


def test_a_copy_of_the_context_end_goes_on_with_what_it_copied():
    copy = Copy()
    context = [9, 5, 6, 5, 6]
    copy.follow(context)
    copy.start(3, 2)  # "5 6" last continued at index 3
    assert copy.draft(context, 5) == [5, 6, 5, 6, 5]
    assert copy.draft(context, 0) == []
    assert Copy().draft(context, 5) == []  # no copy followed


def test_while_a_departure_may_be_an_edit_only_a_long_match_replaces_the_copy():
    copy, _ = following([1, 2, 3, 99])
    assert copy.cursor is None
    assert copy.standing == MIN_RUN - 1  # a lookup's short match waits for the source
    copy.start(0, 1)
    assert copy.standing == 1
    assert Copy().standing == 0
