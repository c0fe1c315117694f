"""The runtime ATen audit: an ALLOW-list of the ops a candidate may issue through PyTorch.

Runs in the runner around EVERY candidate call, timed ones included (defence in depth: the
verdict is the judge's, but heavy math through PyTorch must not pass for a kernel). A
candidate is a Triton kernel plus a thin launcher: it allocates, views, copies, fills, does
elementwise fix-ups and small reductions. Anything else (matmuls, convolutions, attention,
embedding_bag, conv_tbc, sparse products, FFTs, sorts, scans, ...) is `torch-heavy-math`,
whatever Python name reached it. A task may extend the list (`allowed_aten = [...]` in
task.toml) and shrink it (`banned_calls`, which always wins).
"""
from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode

ALLOWED_ATEN = frozenset({
    # allocation
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "arange", "scalar_tensor", "lift_fresh",
    "lift_fresh_copy", "_efficientzerotensor", "resize_",
    # views and metadata
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "expand", "expand_as", "permute",
    "transpose", "t", "squeeze", "unsqueeze", "select", "slice", "narrow", "split", "split_with_sizes", "chunk",
    "unbind", "flatten", "unflatten", "alias", "detach", "view_as", "view_as_real", "view_as_complex",
    "movedim", "diagonal", "contiguous", "set_", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "is_contiguous", "_local_scalar_dense", "is_nonzero", "item", "_has_compatible_shallow_copy_type",
    # copies and fills
    "copy_", "clone", "_to_copy", "to", "_copy_from", "_copy_from_and_resize", "cat", "stack", "fill_", "zero_",
    "fill", "masked_fill", "masked_fill_", "index_select", "gather", "index", "index_put_", "index_put",
    "_index_put_impl_", "scatter", "scatter_", "repeat", "repeat_interleave", "flip", "roll",
    "constant_pad_nd", "pad", "where", "_unsafe_index",
    # elementwise
    "add", "add_", "sub", "sub_", "rsub", "mul", "mul_", "div", "div_", "neg", "neg_", "abs", "abs_", "sqrt",
    "rsqrt", "pow", "pow_", "reciprocal", "clamp", "clamp_", "clamp_min", "clamp_max", "clip", "maximum",
    "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "logical_xor",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "isnan", "isinf", "isfinite", "nan_to_num",
    "sign", "floor", "ceil", "round", "trunc", "remainder", "fmod", "floor_divide", "exp", "exp2", "log",
    "log2", "sigmoid", "tanh", "relu", "silu", "erf", "sin", "cos", "lerp", "addcmul", "addcdiv",
    # small reductions
    "sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "any", "all", "prod", "equal", "allclose",
    "count_nonzero",
})


class AllowListAudit(TorchDispatchMode):
    """Records every ATen op outside the allow-list (or in the task's banned list)."""

    def __init__(self, extra_allowed=(), banned=()):
        super().__init__()
        self.allowed = (ALLOWED_ATEN | set(extra_allowed)) - set(banned)
        self.hits: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in self.allowed:
            self.hits.add(name)
        return func(*args, **(kwargs or {}))

    def message(self, where: str) -> str:
        return (f"rejected [torch-heavy-math] {where}: the candidate ran PyTorch op(s) {', '.join(sorted(self.hits))}, "
                f"which are not on the allow-list of ATen ops a candidate may use (allocation, views, copies, "
                f"elementwise, small reductions; a task extends it with allowed_aten in task.toml): the task's "
                f"heavy math must be in Triton")
