"""The repacked kernels' prefetch distance per host microarchitecture and batch size."""

from gguf import GGMLQuantizationType as T

from pantheon.engine.kernels.stream import DEFAULT_AHEAD, ZEN_AHEAD, prefetch_ahead

# A single-vector pass reads their blocks in address order (Q5_K too since its qh words stand before its
# quant words, repack layout 9).
IN_ORDER = (T.Q4_0, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K)


def test_zen_leaves_single_vector_passes_to_the_hardware_prefetcher():
    for qtype in IN_ORDER:
        for n in (1, 2, 3):
            assert prefetch_ahead(qtype, n, "znver4") == 0


def test_zen_prefetches_far_ahead_for_passes_of_four_vectors():
    for qtype in IN_ORDER:
        for n in (4, 8, 128):
            assert prefetch_ahead(qtype, n, "znver4") == ZEN_AHEAD == 65536


def test_other_hosts_prefetch_every_stream_4_kib_ahead():
    for cpu in ("sapphirerapids", "icelake-server", "generic"):
        for qtype in IN_ORDER:
            for n in (1, 8):
                assert prefetch_ahead(qtype, n, cpu) == DEFAULT_AHEAD == 4096


def test_this_host_gets_a_whole_number_of_cache_lines():
    for qtype in IN_ORDER:
        for n in (1, 8):
            assert prefetch_ahead(qtype, n) >= 0 and prefetch_ahead(qtype, n) % 64 == 0
