"""llama-server's `samplers` on Pantheon's fixed chain: left-out samplers do nothing, the order must hold."""

import pytest

from pantheon.serve.http import sampler_order
from pantheon.serve.http.errors import RequestError
from tests.pantheon.serve.http.server import call

# SillyTavern's llama.cpp preset sends its whole sampler order and every sampler's settings.
TAVERN = {"samplers": ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "tfs_z", "top_p", "min_p", "xtc",
                       "temperature"],
          "typical_p": 1, "tfs_z": 1, "top_n_sigma": -1, "mirostat": 0, "mirostat_tau": 5, "mirostat_eta": 0.1,
          "dry_multiplier": 0, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": 0,
          "dry_sequence_breakers": ["\n", ":", "\"", "*"], "xtc_probability": 0, "xtc_threshold": 0.1,
          "dynatemp_range": 0, "dynatemp_exponent": 1, "min_keep": 0, "repeat_penalty": 1.1, "top_k": 40,
          "top_p": 0.95, "min_p": 0.05, "temperature": 0.7, "cache_prompt": True}


# what a list leaves out of the penalties and llama.cpp's optional samplers, in the tests below
NOTHING = {"repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0,
           "top_n_sigma": -1.0,
           "typical_p": 1.0, "xtc_probability": 0.0, "dynatemp_range": 0.0}


def test_names_aliases_and_letters_map_onto_the_chain():
    assert sampler_order.samplers("s", ["Top-K", "nucleus", "min_p", "temp", "tfs_z", "dry", "typical", "xtc",
                                        "top-n-sigma"]) == (
        "top_k", "top_p", "min_p", "temperature", "dry", "typical_p", "xtc", "top_n_sigma")
    assert sampler_order.samplers("s", "edkypmxt") == ("penalties", "dry", "top_k", "typical_p", "top_p", "min_p",
                                                      "xtc", "temperature")
    assert sampler_order.samplers("s", []) == ()


def test_infill_is_taken_where_fim_clients_put_it_and_turns_its_sampler_on():
    order = sampler_order.samplers("samplers", ["top_k", "top_p", "infill"])  # llama.vim's and llama.vscode's
    assert order == ("top_k", "top_p", "infill") and sampler_order.samplers("s", "kpi") == order
    assert sampler_order.apply({"top_k": 40, "top_p": 0.9}, order) == {
        "top_k": 40, "top_p": 0.9, "infill": True, **NOTHING, "min_p": 0.0, "temperature": 1.0}
    assert "infill" not in sampler_order.apply({}, ("top_k",))
    with pytest.raises(RequestError) as err:
        sampler_order.apply({"temperature": 0.5}, ("top_k", "temperature", "infill"))  # infill acts after it
    assert err.value.param == "samplers" and err.value.code == "unsupported_value"
    with pytest.raises(RequestError):  # greedy before infill keeps one token for it; ours runs it first
        sampler_order.apply({"temperature": 0}, ("top_k", "temperature", "infill"))
    assert sampler_order.apply({"temperature": 0}, ("top_k", "temperature"))["temperature"] == 0


@pytest.mark.parametrize("value,code", [(5, "invalid_type"), ([None], "invalid_type"), ({"a": 1}, "invalid_type")])
def test_bad_shapes_are_refused(value, code):
    with pytest.raises(RequestError) as err:
        sampler_order.samplers("samplers", value)
    assert err.value.param == "samplers" and err.value.code == code


def test_a_sampler_left_out_is_set_to_do_nothing():
    out = sampler_order.apply({"top_k": 10, "repeat_penalty": 1.3}, ("top_k",))
    assert out == {"top_k": 10, **NOTHING, "top_p": 1.0, "min_p": 0.0, "temperature": 1.0}
    assert sampler_order.apply({"top_k": 10}, None) == {"top_k": 10}


def test_the_order_of_samplers_that_act_must_be_ours():
    with pytest.raises(RequestError) as err:
        sampler_order.apply({}, ("temperature", "top_k", "top_p", "min_p"))  # defaults: all four act
    assert err.value.param == "samplers" and err.value.code == "unsupported_value"
    with pytest.raises(RequestError):
        sampler_order.apply({"repeat_penalty": 1.1}, ("top_k", "penalties", "temperature"))


@pytest.mark.parametrize("sampling, order", [({"typical_p": 0.9}, ("top_p", "typ_p")),
                                             ({"xtc_probability": 0.5}, ("xtc", "min_p")),
                                             ({"top_n_sigma": 1.0}, ("top_k", "top_n_sigma")),
                                             ({"dry_multiplier": 0.8, "repeat_penalty": 1.1}, ("dry", "penalties")),
                                             ({"dynatemp_range": 0.5, "temperature": 1.0}, ("temperature", "top_k"))])
def test_llama_cpps_optional_samplers_keep_their_place_in_the_chain(sampling, order):
    named = sampler_order.samplers("samplers", list(order))
    with pytest.raises(RequestError):
        sampler_order.apply(sampling, named)
    assert sampler_order.apply(sampling, tuple(sorted(named, key=sampler_order.CHAIN.index)))


def test_mirostat_replaces_the_chain_and_its_order():
    assert sampler_order.apply({"mirostat": 2, "temperature": 0.5}, ("temperature", "top_k")) == {
        "mirostat": 2, "temperature": 0.5}


def test_the_order_of_samplers_that_do_nothing_is_free():
    assert sampler_order.apply({"temperature": 0}, ("temperature", "top_k", "top_p", "min_p"))["temperature"] == 0
    assert sampler_order.apply({"temperature": 1.0}, ("temperature", "top_k", "top_p", "min_p"))["temperature"] == 1.0
    left_out = {k: v for k, v in NOTHING.items() if k != "dynatemp_range"}  # temperature is listed
    assert sampler_order.apply({"top_p": 1.0}, ("top_p", "top_k", "min_p", "temperature")) == dict(top_p=1.0,
                                                                                                    **left_out)
    optional_off = {k: left_out[k] for k in ("dry_multiplier", "top_n_sigma", "typical_p", "xtc_probability")}
    assert sampler_order.apply({}, ("top_k", "penalties", "top_p", "min_p", "temperature")) == optional_off


def test_a_greedy_temperature_before_a_filter_that_drops_the_best_token_is_refused():
    """llama.cpp's temperature 0 keeps one token: listed before xtc or typical_p it leaves them nothing to do,
    while Pantheon's chain runs them first (and they can drop the best token)."""
    for extra, name in (({"xtc_probability": 1.0}, "xtc"), ({"typical_p": 0.5}, "typical_p")):
        with pytest.raises(RequestError):
            sampler_order.apply({"temperature": 0, **extra}, ("temperature", name))
        assert sampler_order.apply({"temperature": 0, **extra}, (name, "temperature"))["temperature"] == 0


def test_a_chat_ui_preset_is_served(served):
    status, _, out = call(served.port, "POST", "/completion", dict(TAVERN, model="qwen2", prompt="Once upon",
                                                                   n_predict=3))
    assert status == 200 and out["tokens_predicted"] >= 1, out
    status, _, out = call(served.port, "POST", "/v1/chat/completions", dict(
        TAVERN, model="qwen2", messages=[{"role": "user", "content": "Hi"}], max_tokens=3))
    assert status == 200, out


def test_leaving_samplers_out_draws_as_their_neutral_settings_do(served):
    base = {"model": "qwen2", "prompt": "Once upon a time", "n_predict": 16, "seed": 11, "ignore_eos": True,
            "top_k": 50, "temperature": 50.0, "top_p": 1.0, "min_p": 0.0}
    listed = call(served.port, "POST", "/completion", dict(base, samplers=["top_k"]))[2]["content"]
    spelled = call(served.port, "POST", "/completion", dict(base, temperature=1.0))[2]["content"]
    unlisted = call(served.port, "POST", "/completion", base)[2]["content"]
    assert listed == spelled
    assert unlisted != spelled  # the test can tell: the golden model is peaked, temperature 50 flattens it
