"""GET /metrics: Prometheus text of every served engine's counters and histograms."""

from __future__ import annotations

import re

from parlance.engines.metrics import EngineMetrics, Histogram
from parlance.server.endpoints.metrics import render_prometheus


def test_histogram_buckets_are_cumulative_and_end_with_inf():
    histogram = Histogram(buckets=(0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 3.0):
        histogram.observe(value)
    assert histogram.cumulative() == [("0.1", 2), ("1.0", 3), ("+Inf", 4)]
    assert (histogram.count, histogram.total) == (4, 3.65)


def test_render_labels_each_model_and_types_each_family():
    busy = EngineMetrics(slots_total=4, slots_in_use=2, tokens_generated=7)
    busy.time_to_first_token.observe(0.2)
    text = render_prometheus([("m-1", busy), ('we"ird', EngineMetrics())])
    assert "# TYPE parlance_tokens_generated_total counter" in text
    assert "# TYPE parlance_time_to_first_token_seconds histogram" in text
    assert 'parlance_slots_in_use{model="m-1"} 2' in text
    assert 'parlance_tokens_generated_total{model="we\\"ird"} 0' in text
    assert 'parlance_time_to_first_token_seconds_bucket{model="m-1",le="0.25"} 1' in text
    assert 'parlance_time_to_first_token_seconds_count{model="m-1"} 1' in text
    for line in text.splitlines():  # every sample line is `name{labels} number`
        assert line.startswith("#") or re.fullmatch(r"[a-z_]+\{[^}]*\} [0-9.e+-]+", line), line


async def test_metrics_endpoint_needs_the_key_when_one_is_set(fake_engine):
    import httpx

    from tests.support.fake_app import make_app

    app = make_app(fake_engine, api_keys=("k",))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        assert (await client.get("/metrics")).status_code == 401
        reply = await client.get("/metrics", headers={"authorization": "Bearer k"})
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "parlance_requests_waiting" in reply.text
