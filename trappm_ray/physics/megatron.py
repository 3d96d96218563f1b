"""How Megatron-LM runs a transformer's training step, as the layout model
(:mod:`trappm_ray.physics.parallel`) costs it: its precision and fused optimizer, the states it
keeps per parameter, its padded vocabulary and its attention kernels (Shoeybi et al. 2019;
Narayanan et al., SC'21)."""
from __future__ import annotations

from trappm_ray.physics.memory import OPTIMIZERS, PRECISIONS
from trappm_ray.physics.step_model import FUSED_OPTIMIZER_PASSES, Setting
from trappm_ray.physics.units import SOFTMAX

# Megatron-LM pads the vocabulary to a multiple of 128 (``--make-vocab-size-divisible-by``) times
# the tensor parallel size, so its embedding splits evenly and the output head's GEMM stays aligned
# (an odd size would run off the tensor cores: :func:`trappm_ray.physics.units.misaligned`). The
# 128 alone is kept here (GPT-2's 50,257 words -> 50,304; Megatron at tp 8: 51,200): a block's
# graph is built once for every layout, and the alignment is what the time depends on.
VOCAB_MULTIPLE = 128
# Megatron-LM as the SC'21 runs and vTrain's used it writes attention's scores to memory and
# reads them once in a fused scale-mask-softmax kernel (no FlashAttention): its blocks' time is
# costed so; their memory as eager attention's (the scores and the probabilities both kept).
FUSED_ATTENTION = SOFTMAX


def megatron_setting(precision: str, optimizer: str, recompute: bool) -> Setting:
    """A step's setting as Megatron-LM runs it: mixed precision as a module cast to half (its
    Float16Module, fp32 master weights in the optimizer), not autocast's fp32 residual stream and
    per-GEMM copies (counted as autocast, vTrain's one-node rows read 9.8% instead of 8.1%); Adam
    and AdamW as apex's fused kernel (one pass over the weights, gradients and both moments), not
    torch.optim's foreach list ops."""
    return Setting(precision=precision.removeprefix("amp-"), optimizer=optimizer,
                   fused_optimizer=optimizer in FUSED_OPTIMIZER_PASSES, recompute=recompute)


def megatron_state_bytes(precision: str, optimizer: str) -> tuple[float, float, float]:
    """Bytes per parameter of the weights, the gradients and the optimizer state Megatron-LM keeps
    through a step (:func:`megatron_setting`'s precision): in half precision the module's half
    weights and gradients, and in the optimizer fp32 master weights beside its fp32 state (4
    bytes per state tensor: 16 bytes a parameter with Adam, as ZeRO counts them: Rajbhandari et
    al., SC'20, sec. 3.1); in fp32 the weights are the master copy."""
    states = OPTIMIZERS[optimizer][0]
    if optimizer == "none":
        return float(PRECISIONS[precision][0]), 0.0, 0.0
    if precision in ("fp16", "bf16"):
        return 2.0, 2.0, 4.0 + 4.0 * states
    width = float(PRECISIONS[precision][0])
    return width, width, width * states


def padded_vocab(config: dict) -> dict:
    """``config`` with its ``vocab_size`` padded as Megatron-LM pads it (:data:`VOCAB_MULTIPLE`)."""
    v = config.get("vocab_size")
    if not isinstance(v, int) or v % VOCAB_MULTIPLE == 0:
        return config
    return {**config, "vocab_size": -(-v // VOCAB_MULTIPLE) * VOCAB_MULTIPLE}


__all__ = ["VOCAB_MULTIPLE", "FUSED_ATTENTION", "megatron_setting", "megatron_state_bytes", "padded_vocab"]
