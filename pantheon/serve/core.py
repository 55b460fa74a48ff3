"""What every Backend does the same way: open a served model, admit a request, build it, report health."""

from pantheon.errors import EngineError
from pantheon.serve.http.backend import ContextOverBudget, ServedModel, TooManyChoices
from pantheon.text.prompting import PromptBuilder

THINK_TAGS = ("<think>", "</think>")
RERANK_TEMPLATE = "tokenizer.chat_template.rerank"  # llama.cpp's named template for a reranker's prompt


def served_model(name, metadata, n_ctx, tokenizer, template=None, max_choices=1, config=None, card=None):
    """The front's view of one model: tokenizer, chat prompts (`metadata` as the chat template reads it;
    `template`, --chat-template, overrides the model's), context, think tags, the most choices (n)
    one request may take (the sequences its engine decodes together), from its ModelConfig
    `config` the embedding size and pooling, a reranker's prompt template, and its file's ModelCard."""
    ids = tuple(tokenizer.token_to_id.get(t) for t in THINK_TAGS)
    rerank = metadata.get(RERANK_TEMPLATE)
    return ServedModel(name, tokenizer, PromptBuilder(tokenizer, metadata, template_source=template), n_ctx,
                       ids if None not in ids else (), max(1, max_choices),
                       config.dim if config else 0, config.pooling if config else "",
                       rerank if isinstance(rerank, str) else "", card)


def admit(served, request):
    """The checks a generation passes before any backend queues it; typed errors say which failed."""
    n, n_ctx = len(request.prompt), served.n_ctx
    if n == 0 or request.max_tokens < 0:
        raise EngineError(f"a generation needs a prompt token and max_tokens >= 0, "
                          f"got {n} tokens and max_tokens={request.max_tokens}")
    if n + 1 > n_ctx:
        raise ContextOverBudget(f"prompt of {n} tokens leaves no room to generate in a context of {n_ctx}", n, n_ctx)
    if not 1 <= request.n <= served.max_choices:
        raise TooManyChoices(f"n={request.n}: model {served.name} runs at most {served.max_choices} choices per "
                             f"request (the sequences it decodes together: --batch-slots)")
    request.sampling.validate(served.tokenizer.n_vocab)


def generation(request, served, default_budget=0):
    """The fields an engine needs of `request` (pantheon.engine.scheduler.Request and workers.protocol.Job
    share them): the model's --reasoning-budget applies when the request sets none."""
    return dict(prompt=tuple(request.prompt), max_tokens=request.max_tokens, params=request.sampling,
                stop_ids=tuple(sorted(request.stop_ids)), reasoning_budget=request.reasoning_budget or default_budget,
                think_ids=served.think_ids, logprobs=request.logprobs, n=request.n, embed=request.embed,
                prompt_logprobs=request.prompt_logprobs, post_sampling=request.post_sampling, private=request.private)


def health(models, dies=None, draining=False, pressure=None):
    """(serving, /health body) from ModelInfo records: 200 while any model has a live replica and the
    server is not draining; `pressure`: the memory pressure level's name, where one is watched."""
    serving = any(m.state == "loaded" and m.replicas > 0 for m in models) and not draining
    body = {"status": "draining" if draining else "ok" if serving else "unavailable",
            **({"pressure": pressure} if pressure is not None else {}),
            "models": {m.name: {"state": m.state, "replicas": m.replicas, "n_ctx": m.n_ctx,
                                **({"reason": m.details["reason"]} if m.details.get("reason") else {})}
                       for m in models},
            "dies": dict(dies or {})}
    return serving, body
