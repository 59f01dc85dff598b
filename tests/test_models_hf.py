"""The `hf` backend on real tiny models: every call type against an independent unpadded
forward pass, batch-vs-single consistency, beam log-probabilities, chat templates (SmolLM2),
LoRA adapters, GGUF conversion and config validation."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from model_fixtures import build_lora_adapter, build_tiny_gpt2, smollm2_hf_dir
from selfknow.models import ModelSpecError, load_lm
from selfknow.models.hf import beam, prefix_attention

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def fam_dir(tmp_path_factory) -> Path:
    """A two-checkpoint family of tiny GPT-2s (different seeds), one dir per checkpoint."""
    root = tmp_path_factory.mktemp("fam")
    build_tiny_gpt2(root / "step1", seed=0)
    build_tiny_gpt2(root / "step2", seed=1)
    return root


@pytest.fixture(scope="session")
def tiny_spec(fam_dir) -> dict:
    return {"name": "tiny", "backend": "hf", "path": str(fam_dir), "batch_size": 3,
            "checkpoints": [{"name": "step1"}, {"name": "step2"}]}


@pytest.fixture(scope="session")
def tiny(tiny_spec):
    return load_lm(tiny_spec, "step1", cache_dir=None)


@pytest.fixture(scope="session")
def smol_dir(request) -> Path:
    return smollm2_hf_dir(Path(request.config.cache.mkdir("selfknow-models")))


def ref_token_logprobs(model, ids: list[int]) -> np.ndarray:
    """log p(ids[t] | ids[:t]) for t >= 1 from one unpadded forward pass."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits[:-1], -1)
    return logp.gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1).numpy()


def greedy_ids(model, ids: list[int], n: int) -> list[int]:
    """n greedy tokens after `ids`, one unpadded forward pass each."""
    out = list(ids)
    for _ in range(n):
        with torch.no_grad():
            out.append(int(model(input_ids=torch.tensor([out])).logits[0, -1].argmax()))
    return out[len(ids):]


PROMPTS = ["the cat", "Question: what is two plus two?\nAnswer:", "the dog ate",
           "Paris is the capital of", "A B C"]


# ---- config / checkpoint resolution ---------------------------------------------------------
def test_checkpoint_dirs_and_identity(tiny_spec, fam_dir):
    a = load_lm(tiny_spec, "step1", cache_dir=None)
    b = load_lm(tiny_spec, "step2", cache_dir=None)
    assert a.source == str(fam_dir / "step1") and b.source == str(fam_dir / "step2")
    ia, ib = a._calls.identity, b._calls.identity
    assert ia["revision"].startswith("step1@") and ia["revision"] != ib["revision"]
    # different weights -> different answers
    la, lb = a.loglikelihood([("the cat", " sat")]), b.loglikelihood([("the cat", " sat")])
    assert la != lb
    # per-checkpoint `path` wins
    spec = {"name": "x", "backend": "hf",
            "checkpoints": [{"name": "c", "path": str(fam_dir / "step2")}]}
    assert load_lm(spec, "c", cache_dir=None).source == str(fam_dir / "step2")


def test_hub_revision_per_checkpoint_without_network():
    spec = {"name": "olmo", "backend": "hf", "hub_id": "org/model", "gguf_file": "m.gguf",
            "checkpoints": [{"name": "s1", "revision": "step1000"}, {"name": "s2"}]}
    a, b = load_lm(spec, "s1", cache_dir=None), load_lm(spec, "s2", cache_dir=None)
    assert a._load_kwargs() == {"revision": "step1000", "gguf_file": "m.gguf"}
    assert (a.model_id, a.revision, b.revision) == ("org/model", "step1000", None)
    assert a._calls.identity["revision"] == "step1000"
    assert b._calls.identity["revision"] == "main"
    assert a._key is None and a._tokenizer is None  # nothing loaded yet


@pytest.mark.parametrize("spec,checkpoint,msg", [
    ({"name": "m", "backend": "hf"}, None, "exactly one of 'path'"),
    ({"name": "m", "backend": "hf", "path": "/x", "hub_id": "a/b"}, None, "exactly one of"),
    ({"name": "m", "backend": "hf", "hub_id": "a/b", "dtype": "int3"}, None, "'dtype'"),
    ({"name": "m", "backend": "hf", "hub_id": "a/b", "batch_size": 0}, None, "'batch_size'"),
    ({"name": "m", "backend": "hf", "hub_id": "a/b", "batch_size": True}, None, "'batch_size'"),
    ({"name": "m", "backend": "nope"}, None, "'backend'"),
    ({"name": "m", "backend": "hf", "hub_id": "a/b", "checkpoints": [{"name": "s1"}]}, "s9",
     "unknown checkpoint 's9'"),
    ({"name": "m", "backend": "hf", "hub_id": "a/b",
      "checkpoints": [{"name": "s1"}, {"name": "s1"}]}, None, "appears twice"),
    ({"name": "m", "backend": "hf", "path": "/nonexistent/dir"}, None, "not found"),
    ({"name": "m", "backend": "openai", "model": "x"}, None, "'base_url'"),
    ({"name": "m", "backend": "openai", "model": "x", "base_url": "http://h",
      "mode": "edit"}, None, "'mode'"),
])
def test_bad_specs_name_model_and_key(spec, checkpoint, msg):
    with pytest.raises(ModelSpecError) as err:
        load_lm(spec, checkpoint, cache_dir=None)
    assert msg in str(err.value) and "'m'" in str(err.value)


# ---- generate -------------------------------------------------------------------------------
def test_greedy_batch_matches_single(tiny):
    batch = tiny.generate(PROMPTS, max_new_tokens=10)
    single = [tiny.generate([p], max_new_tokens=10)[0] for p in PROMPTS]
    assert batch == single
    for p, g in zip(PROMPTS, batch):
        assert g.tokens_in == len(tiny.tokenizer(p)["input_ids"])
        assert g.tokens_out == 10 and g.finish_reason == "length"
    # greedy = argmax of an unpadded forward pass, token by token
    ids = tiny.tokenizer(PROMPTS[1])["input_ids"]
    assert tiny.tokenizer.decode(greedy_ids(tiny.model, ids, 10)) == batch[1].text


def test_stop_string_cuts_text_and_counts_tokens(tiny):
    full = tiny.generate([PROMPTS[0]], max_new_tokens=12)[0].text
    stop = full[len(full) // 2: len(full) // 2 + 2]
    g = tiny.generate([PROMPTS[0]], max_new_tokens=12, stop=[stop, "zzzz"])[0]
    assert g.text == full[:full.find(stop)] and g.finish_reason == "stop"
    # tokens_out = tokens up to the one completing the stop
    ids = greedy_ids(tiny.model, tiny.tokenizer(PROMPTS[0])["input_ids"], 12)
    assert stop in tiny.tokenizer.decode(ids[:g.tokens_out])
    assert stop not in tiny.tokenizer.decode(ids[:g.tokens_out - 1])


def test_sampling_is_seeded_per_prompt_and_sample_index(tiny):
    a = tiny.generate(PROMPTS[:3], max_new_tokens=8, temperature=1.0, sample_index=0)
    b = tiny.generate(PROMPTS[2:3], max_new_tokens=8, temperature=1.0, sample_index=0)
    assert a[2] == b[0]
    others = [tiny.generate(PROMPTS[2:3], max_new_tokens=8, temperature=1.0,
                            sample_index=k)[0].text for k in range(1, 5)]
    assert any(t != a[2].text for t in others)


def test_batched_sampling_equals_a_per_prompt_reference(tiny):
    """Each prompt of a batch is sampled exactly as alone: softmax(logits / T), one draw per
    step from a generator seeded by (prompt, sample index), until EOS or the token limit."""
    from selfknow.models.hf.generation import sample_seed

    got = tiny.generate(PROMPTS, max_new_tokens=10, temperature=0.8, sample_index=3)
    for prompt, g in zip(PROMPTS, got):
        ids = tiny.tokenizer(prompt)["input_ids"]
        gen = torch.Generator().manual_seed(sample_seed(prompt, 3))
        out = []
        for _ in range(10):
            with torch.no_grad():
                logits = tiny.model(input_ids=torch.tensor([ids + out])).logits[0, -1]
            out.append(int(torch.multinomial(torch.softmax(logits.float() / 0.8, -1), 1, generator=gen)))
            if out[-1] in tiny.eos_ids:
                break
        assert g.text == tiny.tokenizer.decode(out, skip_special_tokens=True)
        assert g.tokens_out == len(out)


def test_greedy_repeats_share_one_cached_call(tiny_spec, tmp_path):
    lm = load_lm(tiny_spec, "step1", cache_dir=tmp_path)
    a = lm.generate(PROMPTS[:2], max_new_tokens=4, sample_index=0)
    b = lm.generate(PROMPTS[:2], max_new_tokens=4, sample_index=2)
    assert a == b and lm.stats.misses == 2 and lm.stats.hits == 2
    lm.generate(PROMPTS[:2], max_new_tokens=4, temperature=0.7, sample_index=2)
    assert lm.stats.misses == 4  # a sampled repeat is its own call


def test_chat_without_template_is_a_clear_error(tiny):
    with pytest.raises(ValueError, match="no chat template"):
        tiny.generate(["hi"], max_new_tokens=2, chat=True)
    with pytest.raises(ValueError, match="system prompt needs chat"):
        tiny.generate(["hi"], max_new_tokens=2, system="be brief")


# ---- beam search ----------------------------------------------------------------------------
@pytest.mark.parametrize("stop", [("e",), ("\n", " the")])
def test_beam_logprobs_equal_forward_pass(tiny, stop):
    prompt = PROMPTS[1]
    ids = tiny.tokenizer(prompt)["input_ids"]
    beams = tiny.beam_search_ids(ids, num_beams=6, max_new_tokens=8, stop=stop)
    assert len(beams) == 6
    lps = [b["logprob"] for b in beams]
    assert lps == sorted(lps, reverse=True)
    assert len({tuple(b["ids"]) for b in beams}) == 6
    n_stopped = 0
    for b in beams:
        ref = ref_token_logprobs(tiny.model, ids + b["ids"])[len(ids) - 1:].sum()
        assert b["logprob"] == pytest.approx(ref, abs=1e-4)
        assert not any(s in b["text"] for s in stop)
        if b["finish_reason"] == "stop":
            n_stopped += 1
            text = tiny.tokenizer.decode(b["ids"])
            assert any(s in text for s in stop)  # the stopping token is included ...
            assert not any(s in tiny.tokenizer.decode(b["ids"][:-1]) for s in stop)  # ... once
            assert text.startswith(b["text"])
    assert n_stopped > 0  # the test must exercise cut beams
    public = tiny.beam_search([prompt], num_beams=6, max_new_tokens=8, stop=stop)[0]
    assert [(x.text, x.logprob) for x in public] == [(b["text"], b["logprob"]) for b in beams]


def test_beams_match_hf_beam_search_without_stop(tiny):
    """Without stops our beams are HF's beams: same sequences, scores = sum of logprobs."""
    ids = tiny.tokenizer(PROMPTS[0])["input_ids"]
    ours = tiny.beam_search_ids(ids, num_beams=4, max_new_tokens=4, stop=())
    with torch.no_grad():
        out = tiny.model.generate(
            input_ids=torch.tensor([ids]), num_beams=4, num_return_sequences=4,
            max_new_tokens=4, do_sample=False, length_penalty=0.0, early_stopping=True,
            output_scores=True, return_dict_in_generate=True, pad_token_id=tiny.pad_id)
    hf = {tuple(s[len(ids):].tolist()): float(sc)
          for s, sc in zip(out.sequences, out.sequences_scores)}
    assert {tuple(b["ids"]) for b in ours} == set(hf)
    for b in ours:
        assert b["logprob"] == pytest.approx(hf[tuple(b["ids"])], abs=1e-4)


# 60 short QA-style prompts over the tiny tokenizer's words; with ten beams of twelve tokens
# their beams stop at the newline at many ranks and lengths
_WORDS = "the cat dog bird sat ate sang on mat bone song what is two plus sky blue Paris Berlin".split()
GEN_PROMPTS = [f"Question: {' '.join(_WORDS[(i * 7 + j * 3) % len(_WORDS)] for j in range(1 + i % 5))}?\nAnswer:"
               if i % 2 else " ".join(_WORDS[(i * 5 + j) % len(_WORDS)] for j in range(2 + i % 7))
               for i in range(60)]


def hf_generate_beams(lm, prompt_ids, *, num_beams, max_new_tokens, stop):
    """transformers' own beam search as the persistent authors call it (conset/gen_cands.py):
    per beam, the generated text up to its first stop, the whole decoded text and the
    sequence score."""
    with torch.inference_mode():
        out = lm.model.generate(
            input_ids=torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
            do_sample=False, num_beams=num_beams, num_return_sequences=num_beams,
            max_new_tokens=max_new_tokens, length_penalty=0.0, output_scores=True,
            return_dict_in_generate=True, pad_token_id=lm.pad_id, stop_strings=list(stop),
            tokenizer=lm.tokenizer)
    beams = []
    for seq, score in zip(out.sequences, out.sequences_scores):
        gen = [t for t in seq[len(prompt_ids):].tolist() if t >= 0]
        text = lm.tokenizer.decode(gen, skip_special_tokens=True)
        cut = min([i for i in (text.find(x) for x in stop) if i >= 0], default=len(text))
        beams.append((text[:cut], text, float(score)))
    return beams


def test_beams_equal_transformers_generate_with_stop_strings(tiny_spec):
    """The batched search returns what `generate(num_beams=10, num_return_sequences=10,
    length_penalty=0.0, stop_strings=["\n"])` returns: the same texts in the same order,
    scores within 1e-4, on 60 prompts whose beams stop at the newline at different ranks.
    A search that lets a stopping candidate finish at any rank, or looks past the step's best
    2k candidates, differs on some of them."""
    lm = load_lm({**tiny_spec, "batch_size": 8}, "step1", cache_dir=None)
    ids = [lm.tokenizer(p)["input_ids"] for p in GEN_PROMPTS]
    got = lm.beam_search_batch(ids, num_beams=10, max_new_tokens=12, stop=("\n",))
    stop_ranks, mixed = set(), 0
    for x, beams in zip(ids, got):
        want = hf_generate_beams(lm, x, num_beams=10, max_new_tokens=12, stop=("\n",))
        assert [b["text"] for b in beams] == [t for t, _, _ in want]
        assert [b["raw"] for b in beams] == [raw for _, raw, _ in want]  # what the authors' NLI reads
        np.testing.assert_allclose([b["logprob"] for b in beams], [sc for _, _, sc in want], atol=1e-4, rtol=0)
        reasons = [b["finish_reason"] for b in beams]
        stop_ranks |= {r for r, why in enumerate(reasons) if why == "stop"}
        mixed += len(set(reasons)) == 2
    assert len(stop_ranks) >= 8 and mixed >= 10  # stops at many ranks, beside length-capped beams


def reference_beam_search(lm, prompt_ids, *, num_beams, max_new_tokens, stop):
    """The one-prompt loop (unpadded prompt, its own KV cache, candidates decoded one by one)
    with `generate`'s rules (the best max(2, 1 + #EOS) x k candidates; a stopping one finishes
    only among the first k): the oracle the batched search must reproduce."""
    from selfknow.models.hf.compat import cache_kwarg, kv_cache
    from selfknow.models.hf.generation import first_stop

    model, tok, eos, k = lm.model, lm.tokenizer, lm.eos_ids, num_beams
    keep = max(2, 1 + len(eos)) * k
    vocab_k = min(keep, int(model.config.get_text_config().vocab_size))
    finished, running = [], [([], 0.0)]
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([prompt_ids]), use_cache=True)
        past, logits = kv_cache(out), out.logits[:, -1, :]
        for step in range(max_new_tokens):
            top_lp, top_id = torch.log_softmax(logits.float(), -1).topk(vocab_k, dim=-1)
            cands = [(score + lp, b, tid) for b, (_, score) in enumerate(running)
                     for lp, tid in zip(top_lp[b].tolist(), top_id[b].tolist())]
            cands.sort(key=lambda c: -c[0])
            nxt, src = [], []
            for rank, (score, b, tid) in enumerate(cands[:keep]):
                if len(nxt) == k and len(finished) >= k and score <= finished[-1]["logprob"]:
                    break
                ids = running[b][0] + [tid]
                text = tok.decode(ids, skip_special_tokens=True)
                pos = first_stop(text, stop)
                if tid in eos or pos >= 0:
                    if rank < k and (len(finished) < k or score > finished[-1]["logprob"]):
                        finished.append({"ids": ids, "text": text if pos < 0 else text[:pos],
                                         "logprob": score, "finish_reason": "stop"})
                        finished.sort(key=lambda f: -f["logprob"])
                        del finished[k:]
                elif len(nxt) < k:
                    nxt.append((ids, score))
                    src.append(b)
            if not nxt or (len(finished) >= k and nxt[0][1] <= finished[-1]["logprob"]):
                running = []
                break
            running = nxt
            if step == max_new_tokens - 1:
                break
            past.reorder_cache(torch.tensor(src))
            out = model(input_ids=torch.tensor([[ids[-1]] for ids, _ in running]),
                        use_cache=True, **{cache_kwarg(model): past})
            past, logits = kv_cache(out), out.logits[:, -1, :]
    for ids, score in running:
        finished.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=True),
                         "logprob": score, "finish_reason": "length"})
    finished.sort(key=lambda f: -f["logprob"])
    return finished[:k]


# prompts of 2..~40 tokens; with stop "e" some beams stop at the first token, others late
LONG_PROMPTS = PROMPTS + [
    "Rate your confidence on a scale of 0-9. Confidence:",
    "Question: which colour is the sky?\nAnswer: blue\nQuestion: what is two plus two?\n"
    "Answer: 4\nQuestion: what is the capital of France?\nAnswer:",
    "B", "the bird sang a song.\nthe dog ate the bone.\nthe cat"]


def assert_same_beams(got, want):
    assert [(b["ids"], b["text"], b["finish_reason"]) for b in got] == \
        [(b["ids"], b["text"], b["finish_reason"]) for b in want]
    np.testing.assert_allclose([b["logprob"] for b in got], [b["logprob"] for b in want],
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("num_beams,max_new_tokens,stop", [
    (10, 12, ("\n",)), (5, 8, ("e",)), (4, 6, ("\n", " the")), (3, 1, ("\n",)),
    (3, 0, ("\n",))])
def test_batched_beams_equal_one_at_a_time(tiny_spec, num_beams, max_new_tokens, stop):
    lm = load_lm({**tiny_spec, "batch_size": 4}, "step1", cache_dir=None)
    ids = [lm.tokenizer(p)["input_ids"] for p in LONG_PROMPTS]
    assert len({len(x) for x in ids}) >= 6  # really different lengths: real left padding
    batched = lm.beam_search_batch(ids, num_beams=num_beams, max_new_tokens=max_new_tokens,
                                   stop=stop)
    stop_lengths = set()
    for x, got in zip(ids, batched):
        want = reference_beam_search(lm, x, num_beams=num_beams,
                                     max_new_tokens=max_new_tokens, stop=stop)
        assert_same_beams(got, want)
        stop_lengths |= {len(b["ids"]) for b in got if b["finish_reason"] == "stop"}
    if max_new_tokens > 1 and stop == ("e",):
        assert len(stop_lengths) >= 3  # beams of one batch stop at different steps
    # the public call (cached path, padded batches of 4) returns the same beams
    public = lm.beam_search(LONG_PROMPTS, num_beams=num_beams, max_new_tokens=max_new_tokens,
                            stop=stop)
    for got, want in zip(public, batched):
        assert [(b.text, b.logprob) for b in got] == [(b["text"], b["logprob"]) for b in want]


@pytest.mark.parametrize("shared_prefix,byte_table", [(False, True), (True, False)])
def test_fallback_paths_equal_one_at_a_time(tiny_spec, shared_prefix, byte_table):
    """The per-beam full KV cache (models whose attention is not plain softmax) and the
    tokenizer's own decode (tokenizers that are not byte-level) give the same beams."""
    lm = load_lm(tiny_spec, "step1", cache_dir=None)
    ids = [lm.tokenizer(p)["input_ids"] for p in LONG_PROMPTS[:6]]
    kw = dict(k=5, max_new_tokens=8, stop=["e", "\n"])
    if not byte_table:
        lm._byte_table_cache = None
    got = beam.search_group(lm, ids, shared_prefix=shared_prefix, **kw)
    for x, beams in zip(ids, got):
        assert_same_beams(beams, reference_beam_search(lm, x, num_beams=5, max_new_tokens=8,
                                                       stop=("e", "\n")))


def test_beam_search_sets_its_attention_for_the_steps_only(tiny_spec, monkeypatch):
    """The shared-prefix attention is the model's attention during the steps only: an eager
    model prefills with eager attention (same beams as the one-prompt search, eager too) and
    is eager again afterwards, also when a step fails."""
    lm = load_lm(tiny_spec, "step1", cache_dir=None)
    model = lm.model  # shared with the other tests' LMs of step1: restored below
    own = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        assert prefix_attention.supported(model)
        ids = [lm.tokenizer(p)["input_ids"] for p in LONG_PROMPTS[:4]]
        got = beam.search_group(lm, ids, k=4, max_new_tokens=6, stop=["\n"])
        assert model.config._attn_implementation == "eager"
        for x, beams in zip(ids, got):
            assert_same_beams(beams, reference_beam_search(lm, x, num_beams=4,
                                                           max_new_tokens=6, stop=("\n",)))
        seen = []

        def failing_step(self, *args):
            seen.append(self.model.config._attn_implementation)
            raise RuntimeError("step failed")

        monkeypatch.setattr(beam.BeamSearch, "forward", failing_step)
        with pytest.raises(RuntimeError, match="step failed"):
            beam.search_group(lm, ids, k=4, max_new_tokens=6, stop=["\n"])
        assert seen == [prefix_attention.NAME] and model.config._attn_implementation == "eager"
    finally:
        model.set_attn_implementation(own)


@pytest.mark.parametrize("missing", ["mask interface", "attention switch"])
def test_without_the_internals_it_needs_the_search_takes_the_plain_path(tiny_spec, monkeypatch,
                                                                        missing):
    """The shared-prefix attention is an optional speed-up: on a transformers without an
    internal it uses (here removed), `supported` says no, and the public search runs the plain
    per-beam cache and returns the same beams (ids, texts, finish reasons; log-probabilities
    within float rounding) as with the kernel."""
    import transformers
    import transformers.masking_utils

    lm = load_lm({**tiny_spec, "batch_size": 4}, "step1", cache_dir=None)
    ids = [lm.tokenizer(p)["input_ids"] for p in LONG_PROMPTS]
    kw = dict(num_beams=5, max_new_tokens=8, stop=("e", "\n"))
    assert prefix_attention.supported(lm.model)
    fast = lm.beam_search_batch(ids, **kw)
    if missing == "mask interface":
        monkeypatch.delattr(transformers.masking_utils, "AttentionMaskInterface")
    else:
        monkeypatch.delattr(transformers.PreTrainedModel, "_can_set_attn_implementation")
    assert not prefix_attention.supported(lm.model)

    def kernel(model):
        raise AssertionError("the shared-prefix attention ran")

    monkeypatch.setattr(prefix_attention, "attention", kernel)
    plain = lm.beam_search_batch(ids, **kw)
    for got, want in zip(plain, fast):
        assert_same_beams(got, want)
    assert sum(len(b) for b in plain) == 5 * len(ids)


def test_byte_table_decodes_like_the_tokenizer(tiny, smol):
    """Joined token bytes decode exactly as `tokenizer.decode(skip_special_tokens=True)`,
    including special tokens (skipped) and multi-byte characters split across tokens."""
    rng = np.random.default_rng(0)
    for lm in (tiny, smol):
        tok, table = lm.tokenizer, lm.byte_table
        assert table is not None and len(table) == len(tok)
        text = "naïve café – 東京 ✓ <|im_end|>\n"
        seqs = [tok(text, add_special_tokens=False)["input_ids"]]
        seqs += [rng.integers(0, len(tok), rng.integers(1, 12)).tolist() for _ in range(2000)]
        for seq in seqs:
            want = tok.decode(seq, skip_special_tokens=True)
            assert b"".join(table[t] for t in seq).decode("utf-8", "replace") == want, seq


def test_batched_beam_logprobs_equal_unpadded_forward_pass(tiny_spec):
    lm = load_lm({**tiny_spec, "batch_size": 16}, "step1", cache_dir=None)
    ids = [lm.tokenizer(p)["input_ids"] for p in LONG_PROMPTS]
    n_stop = n_len = 0
    for stop in [("e", "\n"), ("\n",)]:  # beams cut at a stop, and beams at the limit
        batched = lm.beam_search_batch(ids, num_beams=6, max_new_tokens=8, stop=stop)
        n_stop, n_len = check_beams_against_forward(lm, ids, batched, n_stop, n_len)
    assert n_stop > 0 and n_len > 0


def check_beams_against_forward(lm, ids, batched, n_stop, n_len):
    for x, beams in zip(ids, batched):
        assert len(beams) == 6 and len({tuple(b["ids"]) for b in beams}) == 6
        lps = [b["logprob"] for b in beams]
        assert lps == sorted(lps, reverse=True)
        for b in beams:
            ref = ref_token_logprobs(lm.model, x + b["ids"])[len(x) - 1:].sum()
            assert b["logprob"] == pytest.approx(ref, abs=1e-4)
            n_stop += b["finish_reason"] == "stop"
            n_len += b["finish_reason"] == "length"
    return n_stop, n_len


def test_batched_beam_search_is_deterministic_and_batch_independent(tiny_spec, tmp_path):
    a = load_lm({**tiny_spec, "batch_size": 16}, "step1", cache_dir=None)
    b = load_lm({**tiny_spec, "batch_size": 2}, "step1", cache_dir=tmp_path)
    kw = dict(num_beams=5, max_new_tokens=8, stop=("\n",))
    first = a.beam_search(LONG_PROMPTS, **kw)
    assert a.beam_search(LONG_PROMPTS, **kw) == first  # bitwise-identical rerun
    # other batch composition (order, size, neighbours): same texts, log-probs within 1e-4
    rev = b.beam_search(LONG_PROMPTS[::-1], **kw)[::-1]
    for x, y in zip(first, rev):
        assert [t.text for t in x] == [t.text for t in y]
        np.testing.assert_allclose([t.logprob for t in x], [t.logprob for t in y], atol=1e-4)
    # the disk cache: only misses are computed (in batches), hits are returned as stored
    assert (b.stats.hits, b.stats.misses) == (0, len(LONG_PROMPTS))
    again = b.beam_search(LONG_PROMPTS[:3] + ["a new prompt"], **kw)
    assert (b.stats.hits, b.stats.misses) == (3, len(LONG_PROMPTS) + 1)
    assert again[:3] == rev[:3]


# ---- scoring --------------------------------------------------------------------------------
def test_loglikelihood_matches_forward_pass(tiny):
    pairs = [("the cat", " sat on"), ("the cat ", "sat on"), ("Answer:", " blue"),
             ("", "the dog"), ("Question: which colour is the sky?\nAnswer:", " blue")]
    got = tiny.loglikelihood(pairs)
    assert got[0] == pytest.approx(got[1], abs=1e-6)  # trailing space moves to continuation
    tok = tiny.tokenizer
    for (ctx, cont), value in zip(pairs, got):
        if ctx.endswith(" "):
            ctx, cont = ctx[:-1], " " + cont
        if ctx:
            whole = tok(ctx + cont)["input_ids"]
            n = len(tok(ctx)["input_ids"])
        else:
            whole = [tok.bos_token_id] + tok(cont)["input_ids"]
            n = 1
        ref = ref_token_logprobs(tiny.model, whole)[n - 1:].sum()
        assert value == pytest.approx(ref, abs=1e-4)
    assert [tiny.loglikelihood([p])[0] for p in pairs] == pytest.approx(got, abs=1e-5)


def test_next_token_logprobs_match_forward_pass(tiny):
    cands = [" A", " B", " C", " D"] + [str(d) for d in range(10)]
    got = tiny.next_token_logprobs(PROMPTS, cands)
    assert got.shape == (len(PROMPTS), len(cands))
    cid = [tiny.tokenizer(c, add_special_tokens=False)["input_ids"][0] for c in cands]
    for p, row in zip(PROMPTS, got):
        ids = tiny.tokenizer(p)["input_ids"]
        with torch.no_grad():
            lp = torch.log_softmax(tiny.model(input_ids=torch.tensor([ids])).logits[0, -1]
                                   .double(), -1)
        np.testing.assert_allclose(row, lp[cid].numpy(), atol=1e-4)
    with pytest.raises(ValueError, match="not a single token"):
        tiny.next_token_logprobs(["x"], ["the cat sat"])


INSTRUCTION = ("Rate your confidence on a scale of 0-9, where 0 is completely uncertain and 9 is "
               "completely certain.\n\nQuestion: ")


def _right_padded(tok, prompts):
    enc = [tok(p)["input_ids"] for p in prompts]
    lengths = torch.tensor([len(e) for e in enc])
    ids = torch.zeros((len(enc), int(lengths.max())), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, e in enumerate(enc):
        ids[i, :len(e)], mask[i, :len(e)] = torch.tensor(e), 1
    return ids, mask, lengths


def test_last_position_logits_with_a_shared_prefix_and_adapter_gradients(fam_dir, tmp_path):
    """Rows sharing an instruction run it once (its KV cache repeated per row) and the LM head
    runs at the last positions only: logits and LoRA gradients equal those of one plain
    forward pass over the padded batch."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfknow.models.hf.scoring import MIN_SHARED_PREFIX, last_position_logits, shared_prefix_length

    tok = AutoTokenizer.from_pretrained(fam_dir / "step1")
    base = AutoModelForCausalLM.from_pretrained(fam_dir / "step1")
    model = PeftModel.from_pretrained(base, build_lora_adapter(fam_dir / "step1", tmp_path / "lora"),
                                      is_trainable=True).eval()
    prompts = [INSTRUCTION + q for q in ("two plus two?\nAnswer: four", "the capital of France?",
                                         "who wrote it?\nCandidate answer: nobody at all\nConfidence:")]
    ids, mask, lengths = _right_padded(tok, prompts)
    assert shared_prefix_length(ids, lengths) >= MIN_SHARED_PREFIX  # the shared path runs
    assert len(set(lengths.tolist())) == 3
    grads = []
    for plain in (False, True):
        model.zero_grad()
        if plain:
            full = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
            out = full[torch.arange(3), lengths - 1]
        else:
            out = last_position_logits(model, ids, mask, lengths)
        assert out.shape == (3, model.config.vocab_size)
        out[:, :10].logsumexp(-1).sum().backward()
        grads.append((out.detach(), torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])))
    torch.testing.assert_close(grads[0][0], grads[1][0], atol=1e-5, rtol=1e-5)
    # float32 gradients summed in another order (the shared prefix runs once): their rounding
    # error scales with the largest terms summed, not with each entry (seen: 1.9e-5
    # on an entry of 0.04 where the largest is ~5, on one CPU and not another); a wrong gradient
    # is off by the order of the gradient itself
    scale = float(grads[0][1].abs().max())
    torch.testing.assert_close(grads[0][1], grads[1][1], atol=1e-5 * scale, rtol=1e-4)
    assert grads[1][1].abs().max() > 0


def test_next_token_logprobs_with_a_shared_prefix_match_single_prompts(tiny):
    prompts = [INSTRUCTION + q for q in ("a?", "what is two plus two?\nAnswer:", "b c d e f g?")]
    cands = [str(d) for d in range(10)]
    got = tiny.next_token_logprobs(prompts, cands)
    cid = [tiny.tokenizer(c, add_special_tokens=False)["input_ids"][0] for c in cands]
    for p, row in zip(prompts, got):
        with torch.no_grad():
            lp = torch.log_softmax(tiny.model(input_ids=torch.tensor([tiny.tokenizer(p)["input_ids"]]))
                                   .logits[0, -1].double(), -1)
        np.testing.assert_allclose(row, lp[cid].numpy(), atol=1e-5)


# ---- adapters and cache identity ------------------------------------------------------------
def test_lora_adapter_changes_outputs_and_cache_identity(tiny_spec, fam_dir, tmp_path):
    ad = build_lora_adapter(fam_dir / "step1", tmp_path / "lora")
    base = load_lm(tiny_spec, "step1", cache_dir=tmp_path / "cache")
    tuned = load_lm(tiny_spec, "step1", cache_dir=tmp_path / "cache", adapter=str(ad))
    pairs = [("the cat", " sat on")]
    lb, lt = base.loglikelihood(pairs), tuned.loglikelihood(pairs)
    assert abs(lb[0] - lt[0]) > 1e-3
    assert tuned.stats.misses == 1 and base.stats.misses == 1
    # rerun: zero model calls
    again = load_lm(tiny_spec, "step1", cache_dir=tmp_path / "cache", adapter=str(ad))
    assert again.loglikelihood(pairs) == lt and (again.stats.hits, again.stats.misses) == (1, 0)
    assert again._key is None  # a full hit never even loads the model
    # retrained adapter at the same path: its content hash changes, so the cache misses
    build_lora_adapter(fam_dir / "step1", tmp_path / "lora", seed=7)
    retrained = load_lm(tiny_spec, "step1", cache_dir=tmp_path / "cache", adapter=str(ad))
    assert retrained.loglikelihood(pairs) != lt and retrained.stats.misses == 1


DIGITS = [str(d) for d in range(10)]


def _outputs(lm) -> tuple:
    """Digit next-token log-probabilities (what a confidence read-out takes), a
    log-likelihood and greedy text of one LM, uncached."""
    return (lm.next_token_logprobs(PROMPTS, DIGITS), lm.loglikelihood([("the cat", " sat on")]),
            [g.text for g in lm.generate(PROMPTS[:2], max_new_tokens=4)])


def test_adapters_switched_on_one_base_equal_fresh_loads(tiny_spec, fam_dir, tmp_path):
    from selfknow.models import RESIDENCY, free_memory
    from selfknow.models.hf import release_bases

    ads = [str(build_lora_adapter(fam_dir / "step1", tmp_path / f"lora{k}", seed=k)) for k in range(2)]
    fresh = {}
    for ad in [None, *ads]:  # reference: each LM alone in the process, loaded from disk
        release_bases()
        fresh[ad] = _outputs(load_lm(tiny_spec, "step1", cache_dir=None, adapter=ad))
    release_bases()
    RESIDENCY.reset()
    lms = {ad: load_lm(tiny_spec, "step1", cache_dir=None, adapter=ad) for ad in [None, *ads]}
    # interleaved: adapter -> none -> other adapter -> back, all on one copy of the weights
    for ad in [ads[0], None, ads[1], ads[0], None, ads[1]]:
        got = _outputs(lms[ad])
        np.testing.assert_array_equal(got[0], fresh[ad][0])
        assert got[1:] == fresh[ad][1:]
    assert (RESIDENCY.loads, RESIDENCY.resident, RESIDENCY.peak) == (1, 1, 1)
    assert fresh[ads[0]][1] != fresh[ads[1]][1] != fresh[None][1]  # the adapters matter
    lms[ads[0]].unload_adapter()  # dropped: the other adapter and the plain model unchanged
    np.testing.assert_array_equal(_outputs(lms[ads[1]])[0], fresh[ads[1]][0])
    lms[ads[1]].unload_adapter()
    np.testing.assert_array_equal(_outputs(lms[None])[0], fresh[None][0])
    np.testing.assert_array_equal(_outputs(lms[ads[0]])[0], fresh[ads[0]][0])  # reloaded
    # another checkpoint is a second base; releasing one frees its weights
    other = load_lm(tiny_spec, "step2", cache_dir=None)
    other.loglikelihood([("the cat", " sat")])
    assert (RESIDENCY.loads, RESIDENCY.peak) == (2, 2)
    other.release()
    assert RESIDENCY.resident == 1
    other.loglikelihood([("the cat", " sat")])  # used again: loaded again
    assert (RESIDENCY.loads, RESIDENCY.resident) == (3, 2)
    del other  # the last LM of a base gone: its weights go too
    free_memory()
    assert RESIDENCY.resident == 1
    release_bases()
    assert RESIDENCY.resident == 0


def test_free_memory_freezes_the_start_up_heap_never_a_base(tiny_spec, fam_dir, tmp_path):
    """The first collection with no base alive freezes what survives it (`gc.freeze`), once;
    a base loaded after it, or alive at a collection, stays collectable: released, its peft
    wrapper's reference cycles go with the next collection."""
    import gc

    from selfknow.models import RESIDENCY, free_memory
    from selfknow.models.hf import release_bases

    adapter = str(build_lora_adapter(fam_dir / "step1", tmp_path / "lora"))
    release_bases()
    gc.unfreeze()  # an earlier test of this process may have frozen its heap
    try:
        RESIDENCY.reset()
        lm = load_lm(tiny_spec, "step1", cache_dir=None, adapter=adapter)
        lm.loglikelihood([("the cat", " sat")])  # the collection before the base's load froze
        frozen = gc.get_freeze_count()
        assert frozen > 0 and RESIDENCY.resident == 1
        assert any(o is lm._base.model for o in gc.get_objects())  # the base is not frozen
        lm.release()
        # freed; frozen once: a second freeze would add every survivor, while a frozen object may
        # still die by reference counting (two did under transformers 5.22.2, one run in two)
        assert RESIDENCY.resident == 0 and gc.get_freeze_count() <= frozen
        lm.loglikelihood([("the cat", " sat")])  # loaded again, and alive at the next collection
        gc.unfreeze()
        free_memory()
        assert gc.get_freeze_count() == 0
        del lm
        free_memory()
        assert RESIDENCY.resident == 0
    finally:
        gc.unfreeze()


def test_sharded_model_load_kwargs_without_gpus():
    import selfknow.models.hf as H

    spec = {"name": "big", "backend": "hf", "hub_id": "org/big", "device": "cuda", "gpu": 2,
            "checkpoints": [{"name": "s1", "revision": "step1"}]}
    lm = load_lm(spec, "s1", cache_dir=None)
    gib = 2**30
    kw = lm.from_pretrained_kwargs(gpu_bytes=[80 * gib, 80 * gib])
    assert kw == {"dtype": torch.bfloat16, "revision": "step1", "device_map": "auto",
                  "max_memory": {0: int(0.85 * 80 * gib), 1: int(0.85 * 80 * gib)}}
    assert lm.sharded and lm._calls.identity["dtype"] == "bfloat16"  # float32 unless asked
    with pytest.raises(ModelSpecError, match="'big'.*gpu: 2.*but 1 CUDA"):
        lm.from_pretrained_kwargs(gpu_bytes=[80 * gib])
    fp16 = load_lm({**spec, "dtype": "float16"}, "s1", cache_dir=None)
    assert fp16.from_pretrained_kwargs(gpu_bytes=[gib] * 2)["dtype"] == torch.float16
    one = load_lm({**spec, "gpu": 1}, "s1", cache_dir=None)  # one GPU: moved there whole
    assert not one.sharded
    assert one.from_pretrained_kwargs() == {"dtype": torch.float32, "revision": "step1"}
    cpu = load_lm({**spec, "device": "cpu"}, "s1", cache_dir=None)
    assert not cpu.sharded
    # LoRA training shards its base the same way (persistent `_hparams` passes `gpu` on)
    from selfknow.protocols.persistent.jobs import _hparams

    hp = _hparams({**spec, "dtype": "bfloat16"}, 1)
    assert (hp["device"], hp["dtype"], hp["gpus"]) == ("cuda", "bfloat16", 2)
    assert H.shard_kwargs("big", 3, [gib] * 4) == {"device_map": "auto",
                                                    "max_memory": {i: int(0.85 * gib) for i in range(3)}}


def test_memory_estimate_from_safetensors_params_and_declared_size(tiny_spec, fam_dir):
    from safetensors.torch import load_file

    from selfknow.models.registry import MEM_OVERHEAD_MB, MEM_UNKNOWN_MB, MEM_WEIGHT_FACTOR, estimate_mem_mb

    n = sum(t.numel() for t in load_file(fam_dir / "step1" / "model.safetensors").values())
    expect = int(np.ceil(n * 4 / 2**20 * MEM_WEIGHT_FACTOR + MEM_OVERHEAD_MB))
    assert estimate_mem_mb(tiny_spec) == expect
    assert estimate_mem_mb({**tiny_spec, "mem_mb": 1234}) == 1234  # explicit request wins
    hub = {"name": "olmo", "backend": "hf", "hub_id": "allenai/Olmo-3-7B", "dtype": "bfloat16",
           "params_b": 7.3}
    assert estimate_mem_mb(hub) == 19453  # 7.3e9 x 2 bytes = 13924 MiB, x 1.25 + 2048
    missing = {"name": "w", "backend": "hf", "path": "/nonexistent/world/model"}
    assert estimate_mem_mb(missing) == MEM_UNKNOWN_MB  # not trained yet when the DAG is built


def test_partial_batch_hits_compute_only_misses(tiny_spec, tmp_path):
    lm = load_lm(tiny_spec, "step1", cache_dir=tmp_path)
    first = lm.generate(PROMPTS[:2], max_new_tokens=5)
    assert (lm.stats.hits, lm.stats.misses) == (0, 2)
    both = lm.generate(PROMPTS[:4], max_new_tokens=5)
    assert (lm.stats.hits, lm.stats.misses) == (2, 4) and both[:2] == first
    lm.generate(PROMPTS[:4], max_new_tokens=6)  # other decoding parameters: new keys
    assert lm.stats.misses == 8


# ---- SmolLM2 (GGUF converted) ---------------------------------------------------------------
@pytest.fixture(scope="session")
def smol(smol_dir):
    """SmolLM2 loaded once (loading takes ~20 s on a busy CPU)."""
    return load_lm({"name": "smol", "backend": "hf", "path": str(smol_dir), "chat": True,
                    "batch_size": 4}, cache_dir=None)


def test_converted_smollm2_is_a_plain_dir_with_chat_template(smol_dir, smol):
    cfg = json.loads((smol_dir / "config.json").read_text())
    assert "quantization_config" not in cfg
    assert (smol_dir / "model.safetensors").is_file()
    lm = smol
    g = lm.generate(["What is the capital of France?", "What is the capital of Germany?"],
                    max_new_tokens=16, stop=["\n"])
    assert "Paris" in g[0].text and "Berlin" in g[1].text
    assert g[0].finish_reason == "stop"
    rendered = lm.render("hi", chat=True, system="Be brief.")
    assert rendered.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert rendered.endswith("<|im_start|>assistant\n")
    # chat next-token: the answer's first token is the top candidate
    lp = lm.next_token_logprobs(["Answer with one letter. Which is a colour? A) red B) nine"],
                                ["A", "B"], chat=True)
    assert lp[0, 0] > lp[0, 1]


@pytest.mark.skipif(not os.environ.get("SELFKNOW_SLOW_TESTS"),
                    reason="loading a GGUF through transformers takes minutes on a busy CPU; "
                           "set SELFKNOW_SLOW_TESTS=1")
def test_gguf_file_spec_loads_the_same_model(smol_dir):
    from selfknow.models.gguf_convert import smollm2_gguf_path

    gguf = smollm2_gguf_path()
    spec = {"name": "smol-gguf", "backend": "hf", "path": str(gguf.parent),
            "gguf_file": gguf.name}
    a = load_lm(spec, cache_dir=None).next_token_logprobs(["The capital of France is"],
                                                          [" Paris", " the"])
    b = load_lm({"name": "smol", "backend": "hf", "path": str(smol_dir)},
                cache_dir=None).next_token_logprobs(["The capital of France is"],
                                                    [" Paris", " the"])
    np.testing.assert_allclose(a, b, atol=1e-4)


def test_smollm2_batched_beams_grouped_query_attention(smol):
    """A Llama-type model (rotary positions, 3 query heads per KV head): the shared-prompt
    attention, left padding and position ids reproduce the one-prompt search (token ids in,
    so the spec's chat setting plays no part)."""
    lm = smol
    cfg = lm.model.config
    assert cfg.num_attention_heads > cfg.num_key_value_heads and prefix_attention.supported(lm.model)
    prompts = ["The capital of France is", "Q: What is 2+2?\nA: 4\nQ: What colour is the "
               "sky?\nA:"]
    ids = [lm.tokenizer(p)["input_ids"] for p in prompts]
    got = lm.beam_search_batch(ids, num_beams=3, max_new_tokens=3, stop=("\n", "."))
    for x, beams in zip(ids, got):
        assert_same_beams(beams, reference_beam_search(lm, x, num_beams=3, max_new_tokens=3,
                                                       stop=("\n", ".")))
        ref = ref_token_logprobs(lm.model, x + beams[0]["ids"])[len(x) - 1:].sum()
        assert beams[0]["logprob"] == pytest.approx(ref, abs=1e-4)


# ---- structured output (JSON-schema constraint) ---------------------------------------------
PROB = {"type": "number", "minimum": 0, "maximum": 1}


def _flat_schema(**props) -> dict:
    return {"type": "object", "properties": props, "required": list(props),
            "additionalProperties": False}


SCHEMAS = [_flat_schema(astronomy=PROB, world_history=PROB), _flat_schema(dom_1=PROB),
           _flat_schema(error_probability=PROB,
                        final_answer={"type": "string", "enum": ["A", "B", "C"]}),
           _flat_schema(cat=PROB, dog=PROB, bird=PROB)]
JSON_PROMPTS = ["the cat", "Question: what is two plus two?\nAnswer:", "the dog ate", "A B C"]


@pytest.fixture(scope="session")
def json_tiny_dir(tmp_path_factory) -> Path:
    """A tiny random GPT-2 whose tokenizer can write JSON (the default corpus has no braces
    or quotes, so no JSON reply could be spelt)."""
    from model_fixtures import CORPUS

    corpus = CORPUS + ['{"astronomy": 0.7, "dom_1": 0.25}', '{"final_answer": "B"}'] * 20
    return build_tiny_gpt2(tmp_path_factory.mktemp("json_tiny"), seed=0, corpus=corpus)


def test_constrained_replies_are_instances_of_their_schemas(json_tiny_dir):
    """A random model, free, writes no JSON; constrained, every greedy and sampled reply (one
    schema per prompt in a batch of mixed schemas) is complete, an instance of its schema with
    its bounds and enum, and stops at its closing brace; a batch gives each row what the row
    alone gives."""
    import jsonschema

    lm = load_lm({"name": "tj", "backend": "hf", "path": str(json_tiny_dir), "batch_size": 3},
                 cache_dir=None)
    assert lm.structured_output  # the schema's default
    free = lm.generate(JSON_PROMPTS, max_new_tokens=24)
    assert not any(g.text.lstrip().startswith("{") for g in free)
    for k in range(4):
        out = lm.generate(JSON_PROMPTS, max_new_tokens=64, json_schemas=SCHEMAS,
                          temperature=0.0 if k == 0 else 1.0, sample_index=k)
        for g, schema in zip(out, SCHEMAS):
            assert g.finish_reason == "stop" and g.text.endswith("}"), g.text
            jsonschema.validate(json.loads(g.text), schema)
            assert list(json.loads(g.text)) == schema["required"]
    batch = lm.generate(JSON_PROMPTS, max_new_tokens=64, json_schemas=SCHEMAS)
    alone = [lm.generate([p], max_new_tokens=64, json_schemas=[s])[0]
             for p, s in zip(JSON_PROMPTS, SCHEMAS)]
    assert batch == alone


def test_structured_output_switch_cache_keys_and_bad_schemas(json_tiny_dir, tmp_path):
    """`structured_output: false` gives the free reply; the schema is part of the cache key
    (a constrained call does not reuse a free reply); a reply the tokenizer cannot complete
    ends; a schema outside the supported flat form and a schema count that does not match
    the prompts fail before any model call."""
    spec = {"name": "tj", "backend": "hf", "path": str(json_tiny_dir)}
    off = load_lm({**spec, "structured_output": False}, cache_dir=None)
    assert off.generate(JSON_PROMPTS[:2], max_new_tokens=16, json_schemas=SCHEMAS[:2]) == \
        off.generate(JSON_PROMPTS[:2], max_new_tokens=16)
    lm = load_lm(spec, cache_dir=tmp_path)
    lm.generate(JSON_PROMPTS[:2], max_new_tokens=16)
    lm.generate(JSON_PROMPTS[:2], max_new_tokens=16, json_schemas=SCHEMAS[:2])
    lm.generate(JSON_PROMPTS[:2], max_new_tokens=16, json_schemas=SCHEMAS[:2])
    assert (lm.stats.misses, lm.stats.hits) == (4, 2)
    # the tiny tokenizer has no "v": the reply ends where the key cannot be spelt, no crash
    for t in (0.0, 1.0):
        cut = lm.generate(["A B C"], max_new_tokens=32, temperature=t,
                          json_schemas=[_flat_schema(astronomy=PROB, virology=PROB)])[0]
        assert cut.finish_reason == "stop" and cut.text.endswith(', "')
    calls = (lm.stats.misses, lm.stats.hits)
    with pytest.raises(ValueError, match="'astronomy'.*only probabilities"):
        lm.generate(["x"], max_new_tokens=4,
                    json_schemas=[_flat_schema(astronomy={"type": "number"})])
    with pytest.raises(ValueError, match="every property must be required"):
        lm.generate(["x"], max_new_tokens=4,
                    json_schemas=[{**SCHEMAS[0], "required": ["astronomy"]}])
    with pytest.raises(ValueError, match="2 JSON schemas for 1 prompts"):
        lm.generate(["x"], max_new_tokens=4, json_schemas=SCHEMAS[:2])
    assert (lm.stats.misses, lm.stats.hits) == calls


# ---- a hub id or revision that cannot be resolved ------------------------------------------
TYPO = {"name": "llama-typo", "backend": "hf", "hub_id": "meta-llama/Meta-Llama-3-8B-Instrct",
        "checkpoints": [{"name": "final", "revision": "5f0b02c"}]}


def test_unresolvable_hub_id_offline_names_the_model_hub_id_and_revision():
    """HF_HUB_OFFLINE=1 (the tests' setting) and weights not in the cache: the load and the
    LoRA-training download fail naming the entry, the hub id and the revision."""
    from selfknow.protocols.persistent.jobs import base_model_dir

    lm = load_lm(TYPO, cache_dir=None)
    expected = r"model 'llama-typo' checkpoint 'final': hub id 'meta-llama/Meta-Llama-3-8B-Instrct' at revision '5f0b02c'.*local Hugging Face cache"
    with pytest.raises(ModelSpecError, match=expected):
        lm.tokenizer
    with pytest.raises(ModelSpecError, match=expected):
        lm.generate(["x"], max_new_tokens=1)
    with pytest.raises(ModelSpecError, match=expected):
        base_model_dir(TYPO, "final")


def test_unresolvable_hub_id_online_names_the_model_hub_id_and_revision(tmp_path):
    """Online, a hub (here a local stand-in) that does not know the repository: the same error
    with the hub's reason, not a traceback of the download."""
    import subprocess
    import sys

    from selfknow.rehearsal.server import QuietHandler, send_json, serve

    class NoRepo(QuietHandler):
        def do_GET(self):
            send_json(self, 404, {"error": "Repository not found"}, [("X-Error-Code", "RepoNotFound")])

        do_HEAD = do_GET

    httpd, url, thread = serve(NoRepo)
    try:
        code = ("from selfknow.models import load_lm\n"
                f"load_lm({TYPO!r}, cache_dir=None).tokenizer\n")
        env = {**os.environ, "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": url, "HF_HOME": str(tmp_path / "hf")}
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and last.startswith("selfknow.models.registry.ModelSpecError: model 'llama-typo' "
                                                    "checkpoint 'final': hub id 'meta-llama/Meta-Llama-3-8B-Instrct' "
                                                    "at revision '5f0b02c' cannot be resolved from the hub"), proc.stderr[-2000:]
