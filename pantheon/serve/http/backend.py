"""The contract between the HTTP layer and whatever runs the models (in-process engine or die workers)."""

from dataclasses import dataclass, field
from typing import Iterator, Optional, Protocol, Union

import numpy as np

from pantheon.errors import PantheonError
from pantheon.engine.sampler import SamplingParams


class BackendError(PantheonError):
    """A request the backend refuses; `status`, `type` and `code` shape the OpenAI error body."""

    status = 500
    type = "server_error"
    code = "internal_error"
    retry_after: Optional[float] = None
    param: Optional[str] = None  # the request field at fault, where one is
    extra: dict = {}  # more members of the error object (llama-server's n_prompt_tokens, n_ctx)


class UnknownModel(BackendError):
    status, type, code = 404, "invalid_request_error", "model_not_found"


class ContextOverBudget(BackendError):
    """The prompt leaves no room to generate; the body carries llama-server's n_prompt_tokens and n_ctx."""

    status, type, code = 400, "invalid_request_error", "context_over_budget"

    def __init__(self, message, n_prompt_tokens=None, n_ctx=None):
        super().__init__(message)
        self.extra = {} if n_ctx is None else {"n_prompt_tokens": n_prompt_tokens, "n_ctx": n_ctx}


class TooManyChoices(BackendError):
    """n asks for more choices than the model decodes together."""

    status, type, code = 400, "invalid_request_error", "invalid_value"
    param = "n"


class JobTooLarge(BackendError):
    """A request whose job outgrows what one message may carry to a die (a grammar or bias list of megabytes)."""

    status, type, code = 413, "invalid_request_error", "request_too_large"


class Overloaded(BackendError):
    """Queue full: 429 with a Retry-After computed from queue depth and observed service time."""

    status, type, code = 429, "rate_limit_error", "overloaded"

    def __init__(self, message, retry_after):
        super().__init__(message)
        self.retry_after = retry_after


class Unavailable(BackendError):
    """No live replica, memory pressure CRITICAL, or shutting down: 503 with Retry-After."""

    status, type, code = 503, "server_error", "unavailable"

    def __init__(self, message, retry_after=1.0):
        super().__init__(message)
        self.retry_after = retry_after


class GenerationFailed(BackendError):
    """The generation started but could not finish (its worker died with no replica left)."""

    status, type, code = 500, "server_error", "generation_failed"


@dataclass(frozen=True)
class ServedModel:
    """What the front needs to turn text into ids for one model name (ids only cross to the backend)."""

    name: str
    tokenizer: object  # pantheon.text.tokenizer.Tokenizer
    prompts: object  # pantheon.text.prompting.PromptBuilder
    n_ctx: int  # the --ctx-cap (or the engine's context): prompt + max_tokens must fit
    think_ids: tuple = ()  # (open, close) token ids of <think> ... </think> when the vocabulary has them
    max_choices: int = 1  # the most choices (n) one request may ask for: the sequences the model decodes together
    n_embd: int = 0  # the hidden size: an embedding's length
    pooling: str = ""  # the GGUF's {arch}.pooling_type name, "" when it states none (pantheon.gguf.config)
    rerank_template: str = ""  # tokenizer.chat_template.rerank: a reranker's prompt, {query} and {document}
    card: object = None  # pantheon.serve.model_card.ModelCard of its file (Ollama's /api/tags), None if unknown


@dataclass(frozen=True)
class ModelInfo:
    """One served name for /v1/models and /health."""

    name: str
    state: str  # "loading" | "loaded" | "failed" | "unloading"
    replicas: int
    n_ctx: int
    created: int
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class GenerationRequest:
    model: str
    prompt: tuple  # token ids
    max_tokens: int
    sampling: SamplingParams
    stop_ids: frozenset
    session: Optional[str] = None
    reasoning_budget: int = 0
    grammar: Optional[str] = None  # a compiled llguidance grammar (pantheon.text.grammar.compile_spec)
    logprobs: Optional[int] = None  # None: none; k: each token's logprob and its k best alternatives
    n: int = 1  # choices sampled from one prompt prefill (choice i with seed + i)
    embed: Optional[str] = None  # a pooling (pantheon.gguf.config.POOLINGS): an embedding, max_tokens 0
    prompt_logprobs: Optional[int] = None  # None: none; k: each prompt token's logprob and k alternatives
    post_sampling: bool = False  # logprobs from the distribution the sampler drew from (post_sampling_probs)
    private: bool = False  # shares no kept KV cache: neither starts from one nor leaves its own (cache_prompt false)


@dataclass(frozen=True)
class PromptLogprobs:
    """Scored prompt tokens (pantheon.engine.logprobs.TokenLogprob each), the first at prompt position
    `start` (>= 1); they all come before the first Tokens."""

    start: int
    scores: tuple


@dataclass(frozen=True, eq=False)
class Embedding:
    """An embedding request's pooled vector, or every token's one after another (pooling none): float32
    [dim] or [n · dim], not normalized; its Finished follows. A numpy array, not Python floats: a long
    input's per-token vectors are held until the response is written (8 bytes a value less)."""

    vector: np.ndarray


@dataclass(frozen=True)
class Tokens:
    """New token ids of one choice of a request, in order (seq = index of the first one in that
    choice); with logprobs asked for, one pantheon.engine.logprobs.TokenLogprob per id, else ()."""

    ids: tuple
    seq: int
    logprobs: tuple = ()
    choice: int = 0
    # the choice's prompt as its first token finds it: all its tokens, and those a kept cache served
    # (what llama-server's per-token timings report; not part of what the event says about the ids)
    prompt_tokens: int = field(default=0, compare=False)
    cached_tokens: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Finished:
    reason: str  # "stop" | "length" | "abort"
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    choice: int = 0  # a stream of n choices ends after n Finished, one per choice
    stop_token: int = -1  # the end token that stopped the choice (not in the text), else -1


class Stream(Protocol):
    """Events of one generation, its choices interleaved; iterating may raise BackendError (e.g.
    GenerationFailed). Iteration is resumable: a consumer that stops and iterates again gets the rest."""

    def __iter__(self) -> Iterator[Union[Tokens, PromptLogprobs, Embedding, Finished]]: ...

    def cancel(self, choice=None) -> None:
        """Stop the generation, or only its choice `choice` (a stop string matched there); each choice
        still ends with a Finished. Idempotent, never raises."""


class Backend(Protocol):
    def models(self) -> list:
        """list[ModelInfo] of every served name."""

    def served(self, name: Optional[str]) -> ServedModel:
        """The model `name` (None or ignored when exactly one is loaded); UnknownModel otherwise."""

    def generate(self, request: GenerationRequest) -> Stream:
        """Start a generation; Overloaded / Unavailable / ContextOverBudget refuse it up front."""

    def health(self) -> tuple:
        """(serving: bool, /health body): pantheon.serve.core.health's shape for every backend."""

    def metrics(self) -> str:
        """Prometheus text exposition, aggregated over every process of the instance."""
