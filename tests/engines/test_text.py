from parlance.engines.text import StopMatcher, Utf8Stream


def released(matcher, *texts):
    out = []
    for i, text in enumerate(texts):
        out += [p.text for p in matcher.push(text, i)]
    return out


def test_utf8_stream_when_character_split_across_tokens_then_held_until_complete():
    stream = Utf8Stream()
    cat = "🐱".encode()
    assert stream.push(cat[:2]) == ""
    assert stream.push(cat[2:] + b"!") == "🐱!"
    assert stream.push(b"\xe6\x97") == ""
    assert stream.flush() == "\ufffd"


def test_stop_matcher_without_stops_releases_immediately():
    assert released(StopMatcher([]), "a", "b") == ["a", "b"]


def test_stop_matcher_when_stop_split_across_pieces_then_cut_before_it():
    matcher = StopMatcher(["END"])
    assert released(matcher, "Hello E", "N", "D tail") == ["Hello "]
    assert matcher.stopped
    assert matcher.push("more", 9) == []


def test_stop_matcher_when_prefix_turns_out_not_a_stop_then_released():
    matcher = StopMatcher(["END"])
    assert [p.text for p in matcher.push("an E", 0)] == []
    assert [p.text for p in matcher.push("x", 1)] == ["an E", "x"]
    assert not matcher.stopped


def test_stop_matcher_flush_releases_held_text_and_earliest_stop_wins():
    matcher = StopMatcher(["\n\n", "Z"])
    assert released(matcher, "ab\n") == []
    assert [p.text for p in matcher.flush()] == ["ab\n"]
    matcher = StopMatcher(["bc", "c"])
    assert released(matcher, "abcd") == ["a"]


def test_stop_matcher_keeps_payloads_with_truncated_piece():
    matcher = StopMatcher(["stop"])
    pieces = matcher.push("go", "p1") + matcher.push("!sto", "p2") + matcher.push("p", "p3")
    assert [(p.text, p.payload, p.cut) for p in pieces] == [("go", "p1", False),
                                                              ("!", "p2", True)]


def test_stop_matcher_names_the_stop_string_that_matched():
    matcher = StopMatcher(["never", "lo w", "wor"])
    assert released(matcher, "Hel", "lo wor", "ld") == ["Hel"]
    assert matcher.matched == "lo w"  # the earliest in the text, not in the list
    assert StopMatcher(["x"]).matched is None
