"""The one table of `tokenizer.ggml.pre` names: each name's split regexes and vocabulary flags, as llama.cpp."""

from dataclasses import dataclass

from pantheon.errors import GGUFError
from pantheon.text.pretokenize import DIGIT_GROUPS, KIMI_K2

# The split expressions of llama.cpp's llm_tokenizer_bpe (llama-vocab.cpp), by LLAMA_VOCAB_PRE_TYPE.
# They are ECMAScript regexes applied one after another, each splitting the pieces the previous made;
# pantheon.text.pretokenize runs them the way llama.cpp's unicode_regex_split does.
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_JAIS2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)"
          r"|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}")
_QWEN2_BODY = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN2 = _CONTRACTIONS + "|" + _QWEN2_BODY
_QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_CJK_DEEPSEEK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_DEEPSEEK_LLM = (
    r"[\r\n]",
    r"\s?[A-Za-z" "\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
    "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
    "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
    "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
    "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
    "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
    "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06"
    "\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
    "\U0001e900-\U0001e943]+",
    r"\s?[!-/:-~" "\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
    r"\s+$",
    _CJK_DEEPSEEK,
    r"\p{N}+",
)
_DEEPSEEK_CODER = (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK_DEEPSEEK, r"\p{N}")
_CJK_KANA = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
_ASCII_PUNCT = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~]"
_DEEPSEEK3 = (r"\p{N}{1,3}", _CJK_KANA,
              _ASCII_PUNCT + r"[A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_SPARK2_5 = (r"\p{N}{1,3}", _CJK_KANA,
             _ASCII_PUNCT + r"[A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]"
             r"|\s+(?!\S)|\s+", r"\p{N}")
# Mixed-case words: upper-case run then lower-case run (the lookahead form of \p{Lu}..\p{Ll}).
_UPPER = r"((?=[\p{L}])([^a-z]))"
_LOWER = r"((?=[\p{L}])([^A-Z]))"
_CASED_WORDS = (r"[^\r\n\p{L}\p{N}]?" + _UPPER + "*" + _LOWER + "+" + _CONTRACTIONS + "?"
                r"|[^\r\n\p{L}\p{N}]?" + _UPPER + "+" + _LOWER + "*" + _CONTRACTIONS + "?")
_GPT4O = _CASED_WORDS + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_GRANITE_EMB = (_GPT4O.replace(r"(?=[\p{L}])", r"(?=[\p{L}\p{M}])"),)
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?" + _UPPER + "*" + _LOWER + r"+|[^\r\n\p{L}\p{N}]?" + _UPPER + "+"
           + _LOWER + r"*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_LETTER_CLASSES = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
                   + _CONTRACTIONS + r"?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
                   r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*" + _CONTRACTIONS + "?")
_TINY_AYA = (DIGIT_GROUPS[1], _LETTER_CLASSES + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+"
             r"|\s+(?!\S)|\s+")
_YOUTU = ("[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c"
          "\u3001-\u303f\ufe30-\ufe4f]+|[\u3105-\u312f]+|[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
          _LETTER_CLASSES + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_FINNISH = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
_CHAMELEON = (r"<sentinel:[0-9]+>", r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )",
              r"\p{N}", r"[\p{P}!-/:-@\[-`{-~]", _GPT2)
_BAILING = (r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
            r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+")
_AFMOE = (DIGIT_GROUPS[0],
          "[\u4e00-\u9fff\u3400-\u4dbf\u8c48-\ufaff\u3040-\u309f\u30a0-\u30ff\uff65-\uff9f\u2f00-\u2fdf"
          "\u0e40-\u0e7f\u0e80-\u0eff\u1780-\u17ff\u1000-\u109f\uaa60-\uaa7f\ua9e0-\ua9ff\uac00-\ud7af"
          "\u1100-\u11ff]+",
          _ASCII_PUNCT + r"[A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_NEWLINES = r"[^\n]+|[\n]+"
_EXAONE_MOE = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+")
_MINICPM5 = (r"\p{N}{1,3}", _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]")


@dataclass(frozen=True)
class PreTokenizer:
    """One `tokenizer.ggml.pre` name: its llama.cpp family, regexes and the vocab flags tied to it."""

    name: str
    family: str  # llama.cpp's LLAMA_VOCAB_PRE_TYPE_<family>
    exprs: tuple
    ignore_merges: bool = False  # a word that is itself a token is taken whole
    clean_spaces: bool = True
    add_bos: bool = False
    byte_encode: bool = True  # GPT-2 byte alphabet; False: raw UTF-8 with <0xXX> byte fallback
    escape_whitespaces: bool = False  # ' ' becomes U+2581 before splitting (SPM-style BPE)
    no_bos: bool = False  # the family default BOS id is dropped (ChatGLM)
    lowercase: bool = True  # the BERT normalizer's default, which `whitespace` turns off


# family: (regexes, the flags every name in it shares)
_FAMILIES = {
    "DEFAULT": (_DEFAULT, {}),
    "LLAMA3": ((_LLAMA3,), {"ignore_merges": True, "add_bos": True}),
    "JAIS2": ((_JAIS2,), {}),
    "DBRX": ((_LLAMA3,), {}),
    "SMAUG": ((_LLAMA3,), {}),
    "DEEPSEEK_LLM": (_DEEPSEEK_LLM, {"clean_spaces": False}),
    "DEEPSEEK_CODER": (_DEEPSEEK_CODER, {"clean_spaces": False}),
    "DEEPSEEK3_LLM": (_DEEPSEEK3, {"clean_spaces": False}),
    "HUNYUAN_DENSE": (_DEEPSEEK3, {"clean_spaces": False}),
    "JOYAI_LLM": (_DEEPSEEK3, {"clean_spaces": False}),
    "HY_V4": (_DEEPSEEK3, {"clean_spaces": False}),
    "SPARK2_5": (_SPARK2_5, {"clean_spaces": False}),
    "YOUTU": (_YOUTU, {"clean_spaces": False, "ignore_merges": True}),
    "FALCON": ((r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]"), {}),
    "STARCODER": ((r"\p{N}", _GPT2), {}),
    "REFACT": ((r"\p{N}", _GPT2), {}),
    "COMMAND_R": ((r"\p{N}", _GPT2), {"clean_spaces": False}),
    "SMOLLM": ((r"\p{N}", _GPT2), {"clean_spaces": False}),
    "CODESHELL": ((r"\p{N}", _GPT2), {}),
    "EXAONE": ((r"\p{N}", _GPT2), {}),
    "MINERVA": ((r"\p{N}", _GPT2), {}),
    "MELLUM2": ((r"\p{N}", _GPT2), {}),
    "GPT2": ((_GPT2,), {}),
    "MPT": ((_GPT2,), {}),
    "OLMO": ((_GPT2,), {}),
    "JAIS": ((_GPT2,), {}),
    "TRILLION": ((_GPT2,), {"clean_spaces": False}),
    "GRANITE_DOCLING": ((_GPT2,), {"clean_spaces": False}),
    "STABLELM2": ((_QWEN2,), {}),
    "QWEN2": ((_QWEN2,), {"clean_spaces": False}),
    "HUNYUAN": ((_QWEN2,), {"clean_spaces": False}),
    "SOLAR_OPEN": ((_QWEN2,), {"clean_spaces": False}),
    "GROK_2": ((_QWEN2,), {"clean_spaces": False}),
    "QWEN35": ((_QWEN35,), {"clean_spaces": False}),
    "PORO": ((_FINNISH,), {"clean_spaces": False}),
    "BLOOM": ((_FINNISH,), {}),
    "GPT3_FINNISH": ((_FINNISH,), {}),
    "CHATGLM4": ((_LLAMA3,), {"no_bos": True}),
    "VIKING": ((_FINNISH, r"\p{N}"), {"clean_spaces": False}),
    "TEKKEN": ((_TEKKEN,), {"clean_spaces": False, "ignore_merges": True, "add_bos": True}),
    "CHAMELEON": (_CHAMELEON, {"add_bos": True, "clean_spaces": False}),
    "GPT4O": ((_GPT4O,), {"clean_spaces": False}),
    "MINIMAX_M2": ((_GPT4O,), {"clean_spaces": False}),
    "GRANITE_EMB_MULTI": (_GRANITE_EMB, {"clean_spaces": False, "ignore_merges": True}),
    "TINY_AYA": (_TINY_AYA, {"clean_spaces": False}),
    "KIMI_K2": ((KIMI_K2,), {"clean_spaces": False}),
    "SUPERBPE": ((r"\p{N}+", r"(?=(\d{3})+(?!\d))"), {"clean_spaces": False}),
    "BAILINGMOE": ((_BAILING,), {"clean_spaces": False}),
    "SEED_CODER": ((_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+"
                    r"|\s*[\r\n]+|\s+(?!\S)|\s+",), {"clean_spaces": False}),
    "UFAKZEKA": ((_QWEN2_BODY,), {"clean_spaces": False}),
    "AFMOE": (_AFMOE, {"clean_spaces": False}),
    "LAGUNA": ((_NEWLINES, _QWEN2), {"clean_spaces": False}),
    "EXAONE_MOE": ((_EXAONE_MOE,), {}),
    "GEMMA4": ((_NEWLINES,), {"byte_encode": False, "escape_whitespaces": True, "add_bos": True}),
    "SARVAM_MOE": ((_NEWLINES,), {"byte_encode": False, "escape_whitespaces": True,
                                   "clean_spaces": False}),
    "MINICPM5": (_MINICPM5, {"ignore_merges": True}),
    "WHITESPACE": ((r"\S+",), {"byte_encode": False, "lowercase": False}),
}

# `tokenizer.ggml.pre` name -> (family, flags that name adds to its family's).
PRE_TOKENIZERS = {
    "default": ("DEFAULT", {}),
    **{n: ("LLAMA3", {}) for n in ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                                    "midm-2.0", "lfm2", "jina-v5-nano")},
    "minicpm5": ("MINICPM5", {}),
    "deepseek-llm": ("DEEPSEEK_LLM", {}),
    "deepseek-coder": ("DEEPSEEK_CODER", {}),
    "deepseek-v3": ("DEEPSEEK3_LLM", {}),
    "spark2_5": ("SPARK2_5", {}),
    "youtu": ("YOUTU", {}),
    "falcon": ("FALCON", {}),
    "mpt": ("MPT", {}),
    "starcoder": ("STARCODER", {}),
    **{n: ("GPT2", {}) for n in ("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
                                  "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "exaone4")},
    "jais-2": ("JAIS2", {}),
    "gemma4": ("GEMMA4", {}),
    "granite-embed-multi-311m": ("GEMMA4", {}),
    "sarvam-moe": ("SARVAM_MOE", {}),
    # add_sep only matters to reranking prompts, which Pantheon does not build.
    **{n: ("GPT2", {}) for n in ("jina-v1-en", "jina-v2-code", "roberta-bpe")},
    "whitespace": ("WHITESPACE", {}),
    "refact": ("REFACT", {}),
    "command-r": ("COMMAND_R", {}),
    **{n: ("QWEN2", {}) for n in ("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2")},
    "qwen35": ("QWEN35", {}),
    "stablelm2": ("STABLELM2", {}),
    "olmo": ("OLMO", {}),
    "dbrx": ("DBRX", {}),
    "smaug-bpe": ("SMAUG", {}),
    "poro-chat": ("PORO", {}),
    "chatglm-bpe": ("CHATGLM4", {}),
    **{n: ("CHATGLM4", {"ignore_merges": True}) for n in ("glm4", "glm5")},
    "viking": ("VIKING", {}),
    "jais": ("JAIS", {}),
    "tekken": ("TEKKEN", {}),
    "smollm": ("SMOLLM", {}),
    "codeshell": ("CODESHELL", {}),
    "bloom": ("BLOOM", {}),
    "gpt3-finnish": ("GPT3_FINNISH", {}),
    "exaone": ("EXAONE", {}),
    "exaone-moe": ("EXAONE_MOE", {}),
    "chameleon": ("CHAMELEON", {}),
    "minerva-7b": ("MINERVA", {}),
    "megrez": ("QWEN2", {"clean_spaces": True}),
    **{n: ("GPT4O", {}) for n in ("gpt-4o", "llama4", "kanana2", "talkie")},
    "granite-embed-multi-97m": ("GRANITE_EMB_MULTI", {}),
    **{n: ("TINY_AYA", {}) for n in ("tiny_aya", "cohere2moe")},
    "superbpe": ("SUPERBPE", {}),
    "trillion": ("TRILLION", {}),
    "granite-docling": ("GRANITE_DOCLING", {}),
    **{n: ("BAILINGMOE", {}) for n in ("bailingmoe", "bailingmoe2", "llada-moe")},
    "seed-coder": ("SEED_CODER", {}),
    "hunyuan": ("HUNYUAN", {}),
    "hunyuan-dense": ("HUNYUAN_DENSE", {}),
    "hy_v4": ("HY_V4", {}),
    "joyai-llm": ("JOYAI_LLM", {}),
    "kimi-k2": ("KIMI_K2", {}),
    "ufakzeka": ("UFAKZEKA", {}),
    "grok-2": ("GROK_2", {}),
    "afmoe": ("AFMOE", {}),
    "laguna": ("LAGUNA", {}),
    "minimax-m2": ("MINIMAX_M2", {}),
    "solar-open": ("SOLAR_OPEN", {}),
    "mellum2": ("MELLUM2", {}),
}


def pre_tokenizer(name):
    """The PreTokenizer for a `tokenizer.ggml.pre` value ('' or None means llama.cpp's 'default')."""
    name = name or "default"
    if name not in PRE_TOKENIZERS:
        raise GGUFError(f"tokenizer.ggml.pre = {name!r} is not a pre-tokenizer Pantheon knows")
    family, extra = PRE_TOKENIZERS[name]
    exprs, flags = _FAMILIES[family]
    return PreTokenizer(name, family, tuple(exprs), **{**flags, **extra})
