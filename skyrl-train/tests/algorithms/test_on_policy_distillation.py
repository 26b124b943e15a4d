"""On-policy distillation's objective on CPU with two tiny models, step by step as the trainer takes it: the student
samples, both models score the sampled tokens, the gaps log p_teacher - log p_student are the token rewards
(`distillation_rewards`), `no_op` makes them the advantages, and the `importance_sampling` loss updates the student.
A few steps must bring the student's distribution toward the teacher's where the student goes: the exact reverse KL
(summed over the vocabulary, on fresh student samples) falls."""

import torch

from skyrl_train.algorithms import compute_advantages, compute_policy_loss, distillation_rewards
from skyrl_train.models.logprobs import response_logprobs
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model

VOCAB = 16  # a small vocabulary: its reverse KL moves within a few steps of 64 samples
PROMPT = torch.tensor([[1, 5, 9, 13]] * 64)
NEW_TOKENS = 4


def peaked_model(seed):
    """A tiny model with wide weights (near-uniform distributions would make every KL small)."""
    model = build_tiny_model(TinyModelSpec(size=1, vocab_size=VOCAB), seed=seed)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.normal_(0, 0.3, generator=generator)
    return model


def sample(student, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        return student.generate(
            PROMPT, do_sample=True, top_k=0, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, pad_token_id=0
        )


def inputs(sequences):
    positions = torch.arange(sequences.shape[1]).expand_as(sequences)
    return dict(input_ids=sequences, attention_mask=torch.ones_like(sequences), position_ids=positions)


def reverse_kl(student, teacher, sequences):
    """Mean over the sampled positions of KL(student || teacher) over the whole vocabulary."""
    with torch.no_grad():
        start = PROMPT.shape[1] - 1
        s = torch.log_softmax(student(**inputs(sequences)).logits[:, start:-1].float(), -1)
        t = torch.log_softmax(teacher(**inputs(sequences)).logits[:, start:-1].float(), -1)
        return float((s.exp() * (s - t)).sum(-1).mean())


def test_a_few_distillation_steps_bring_the_student_to_the_teacher():
    student, teacher = peaked_model(seed=0), peaked_model(seed=1)
    optimizer = torch.optim.Adam(student.parameters(), lr=3e-2)
    before = reverse_kl(student, teacher, sample(student, seed=100))
    for step in range(10):
        sequences = sample(student, seed=step)
        batch, width = inputs(sequences), PROMPT.shape[1]
        mask = torch.ones(sequences.shape[0], NEW_TOKENS)
        with torch.no_grad():
            old, _ = response_logprobs(student, **batch, prompt_width=width)
            teacher_logprobs, _ = response_logprobs(teacher, **batch, prompt_width=width)
        rewards, _ = distillation_rewards(old, teacher_logprobs, mask)
        advantages, _ = compute_advantages("no_op", token_level_rewards=rewards, response_mask=mask)
        log_probs, _ = response_logprobs(student, **batch, prompt_width=width)
        loss, _ = compute_policy_loss(
            "importance_sampling",
            log_probs=log_probs,
            old_log_probs=old,
            advantages=advantages,
            loss_mask=mask,
            config={"loss_reduction": "token_mean"},
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = reverse_kl(student, teacher, sample(student, seed=100))
    assert before > 3.0 and after < 0.3 * before, (before, after)
