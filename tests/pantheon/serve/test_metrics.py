"""Metrics table: rows in any buffer, summed on render, Prometheus 0.0.4 text with inclusive buckets."""

import mmap

from pantheon.serve.metrics import BUCKETS, Layout, Recorder


def samples(text):
    """{series with labels: value} of a Prometheus text exposition, comments skipped."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_rows_in_a_shared_buffer_are_summed():
    layout = Layout(["a", "b"], dies=["gpu0"])
    buf = mmap.mmap(-1, 2 * layout.width * 8)
    table = layout.table(2, buf)
    one, two = Recorder(layout, table, 0), Recorder(layout, table, 1)
    one.request("a", "completions", 200)
    two.request("a", "completions", 200)
    two.request("nobody", "tokenize", 418)
    one.tokens("b", prompt=10, completion=4, cached=6)
    two.in_flight("gpu0", 3)
    again = samples(layout.render(layout.table(2, buf)))  # a second view of the same memory
    assert again['pantheon_requests_total{model="a",endpoint="completions",status="200"}'] == 2
    assert again['pantheon_requests_total{model="other",endpoint="tokenize",status="other"}'] == 1
    assert again['pantheon_prompt_tokens_total{model="b"}'] == 10
    assert again['pantheon_cached_tokens_total{model="b"}'] == 6
    assert again['pantheon_in_flight{die="gpu0"}'] == 3
    assert 'pantheon_queue_depth{model="other"}' not in again


def test_histogram_buckets_are_cumulative_and_inclusive():
    layout = Layout(["m"])
    rec = Recorder(layout, layout.table(1))
    rec.ttft("m", 0.05)  # exactly on a bound: counted in le="0.05"
    rec.ttft("m", 0.3)
    rec.itl("m", 20.0, count=2)  # beyond every bound: only +Inf
    s = samples(rec.render())
    ttft = 'pantheon_time_to_first_token_seconds'
    assert s[f'{ttft}_bucket{{model="m",le="0.025"}}'] == 0
    assert s[f'{ttft}_bucket{{model="m",le="0.05"}}'] == 1
    assert s[f'{ttft}_bucket{{model="m",le="0.5"}}'] == 2
    assert s[f'{ttft}_bucket{{model="m",le="+Inf"}}'] == 2
    assert abs(s[f'{ttft}_sum{{model="m"}}'] - 0.35) < 1e-12 and s[f'{ttft}_count{{model="m"}}'] == 2
    itl = 'pantheon_inter_token_latency_seconds'
    assert s[f'{itl}_bucket{{model="m",le="{BUCKETS[-1]:g}"}}'] == 0
    assert s[f'{itl}_bucket{{model="m",le="+Inf"}}'] == 2 and s[f'{itl}_sum{{model="m"}}'] == 40


def test_every_series_has_help_and_type_and_labels_are_escaped():
    layout = Layout(['we"ird\\name'])
    rec = Recorder(layout, layout.table(1))
    rec.queue_depth('we"ird\\name', 2)
    text = rec.render()
    assert 'pantheon_queue_depth{model="we\\"ird\\\\name"} 2' in text
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert names == {line.split()[2] for line in text.splitlines() if line.startswith("# HELP")}
    assert text.endswith("\n")
