"""Helpers for testing equivariant layers and models, and dense reference implementations.

:func:`assert_equivariant` checks ``f(g . inputs) == g . f(inputs)`` for random (or given)
group elements ``g``, in float64 by default, and, unless told otherwise, that the check is not
trivial: the output must change when the geometric inputs are perturbed in a way that is no
group action (a model blind to the positions passes every invariance check). Actions on inputs
and outputs are named by strings or given as callables ``(g, x) -> g . x``:

* ``"invariant"`` (or ``None``): left unchanged (features, ``edge_index``, ``batch``);
* ``"points"``: points of the homogeneous space, ``(..., n)``: ``A x + t`` for an affine
  ``g = [[A, t], [0, 1]]``, ``A x`` for a linear ``g``;
* ``"vectors"``: vectors such as velocities or forces, ``(..., n)``: the linear part only, ``A x``;
* ``"elements"``: group elements ``(..., m, m)`` multiplied on the left, ``g h``;
* :func:`representation` ``(rep)``: features ``(..., d)`` transformed by a matrix ``rep(g)``,
  for example the Wigner matrices of an e3nn ``Irreps``.

Example::

    import torch
    from pyg_lie.testing import assert_equivariant

    def distances(pos):  # pairwise distances: invariant under rigid motions
        return torch.cdist(pos, pos)

    assert_equivariant(distances, (torch.randn(5, 2),), group="SE2",
                       actions_in="points", actions_out="invariant")

The dense references (:func:`dense_lie_self_attention`, :func:`dense_model_forward`) compute
:class:`~pyg_lie.nn.LieSelfAttention` and :class:`~pyg_lie.models.LieTransformer` over all
pairs with a neighbourhood mask, as the original LieTransformer code does; the sparse layers
are tested against them.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

__all__ = [
    "explainer_mask",
    "assert_equivariant",
    "equivariance_error",
    "EquivarianceResult",
    "representation",
    "sample_elements",
    "ACTIONS",
    "dense_adjacency",
    "dense_lie_self_attention",
    "dense_model_forward",
]

Action = Union[None, str, Callable[[Tensor, Any], Any]]


def _linear_part(g: Tensor, n: int) -> Tensor:
    m = g.shape[-1]
    if m == n or m == n + 1:
        return g[:n, :n]
    raise ValueError(f"a group element of size {m}x{m} cannot act on vectors of dimension {n} "
                     f"(expected {n}x{n} or {n + 1}x{n + 1} matrices)")


def _act_points(g: Tensor, x: Tensor) -> Tensor:
    n = x.shape[-1]
    out = x @ _linear_part(g, n).transpose(0, 1)
    if g.shape[-1] == n + 1:
        out = out + g[:n, n]
    return out


def _act_vectors(g: Tensor, x: Tensor) -> Tensor:
    return x @ _linear_part(g, x.shape[-1]).transpose(0, 1)


def _act_elements(g: Tensor, h: Tensor) -> Tensor:
    if h.shape[-2:] != g.shape:
        raise ValueError(f"'elements' acts on (..., {g.shape[0]}, {g.shape[1]}) group elements, "
                         f"got an input of shape {tuple(h.shape)}")
    return g @ h


def _act_invariant(g: Tensor, x: Any) -> Any:
    return x


#: the named actions of :func:`assert_equivariant`
ACTIONS = {
    "invariant": _act_invariant,
    "points": _act_points,
    "vectors": _act_vectors,
    "elements": _act_elements,
}


def representation(rep: Callable[[Tensor], Tensor]) -> Callable[[Tensor, Tensor], Tensor]:
    """The action ``x -> x rep(g)^T`` on the last axis of features ``(..., d)``.

    Args:
        rep: maps one group element ``(m, m)`` to a ``(d, d)`` matrix, for example
            ``lambda g: irreps.D_from_matrix(g)`` for rotations and an e3nn ``Irreps``, or
            ``lambda g: irreps.D_from_matrix(g[:3, :3])`` for rigid motions.
    """
    if not callable(rep):
        raise TypeError(f"rep must be a callable g -> (d, d) matrix, got {type(rep).__name__}")

    def act(g: Tensor, x: Tensor) -> Tensor:
        D = rep(g).to(dtype=x.dtype, device=x.device)
        if D.shape != (x.shape[-1], x.shape[-1]):
            raise ValueError(f"representation(rep): rep(g) has shape {tuple(D.shape)}, but the features "
                             f"have {x.shape[-1]} channels on their last axis")
        return x @ D.transpose(0, 1)

    act.__name__ = f"representation({getattr(rep, '__name__', 'rep')})"
    act._perturbable = True
    return act


def _resolve_action(action: Action, where: str) -> Callable:
    if action is None:
        return _act_invariant
    if isinstance(action, str):
        if action not in ACTIONS:
            raise ValueError(f"{where}: unknown action {action!r}; use one of {sorted(ACTIONS)}, "
                             f"representation(rep) or a callable (g, x) -> g . x")
        return ACTIONS[action]
    if callable(action):
        return action
    raise TypeError(f"{where}: an action is a name ({sorted(ACTIONS)}), None or a callable (g, x) -> g . x, "
                    f"got {type(action).__name__}")


def _action_name(action: Action) -> str:
    if action is None:
        return "invariant"
    if isinstance(action, str):
        return action
    return getattr(action, "__name__", repr(action))


def sample_elements(group: Any, num: int, generator: Optional[torch.Generator] = None,
                    dtype: torch.dtype = torch.float64) -> Tensor:
    """``(num, m, m)`` elements of ``group`` for an equivariance check.

    Args:
        group: a group name such as ``"SE2"``, a :class:`~pyg_lie.groups.LieGroup` (Haar-random
            elements on compact parts, from :meth:`~pyg_lie.groups.LieGroup.random`) or a finite
            group of :mod:`pyg_lie.groups` (all its elements when ``num`` is at least its
            order, otherwise ``num`` of them drawn without replacement).
        num: number of elements.
        generator: random generator.
        dtype: floating dtype of the elements.
    """
    if isinstance(group, str):
        from .groups import get_group
        group = get_group(group)
    from ._checks import positive_int
    num = positive_int("num_elements", num)
    if hasattr(group, "random"):
        return group.random(num, generator=generator, dtype=dtype)
    if hasattr(group, "elements"):
        E = group.elements(dtype=dtype)
        if num >= E.shape[0]:
            return E
        return E[torch.randperm(E.shape[0], generator=generator)[:num]]
    raise TypeError(f"group must be a name, a LieGroup or a finite group with elements(), "
                    f"got {type(group).__name__}; or pass elements=")


class EquivarianceResult(NamedTuple):
    """What :func:`equivariance_error` measured.

    Attributes:
        error: largest ``|f(g . inputs) - g . f(inputs)|`` over the elements and outputs.
        errors: the same per output.
        scale: largest ``|f(inputs)|`` (the tolerance's ``rtol`` multiplies it).
        worst_element: index of the element with the largest error.
        change: largest ``|f(perturbed inputs) - f(inputs)|`` under the non-symmetric
            perturbation, or ``None`` when it was not measured.
    """

    error: float
    errors: Tuple[float, ...]
    scale: float
    worst_element: int
    change: Optional[float]


def _as_outputs(out: Any) -> Tuple[Tensor, ...]:
    if isinstance(out, Tensor):
        return (out,)
    if isinstance(out, (tuple, list)) and all(isinstance(o, Tensor) for o in out):
        return tuple(out)
    raise TypeError(f"f must return a Tensor or a tuple of Tensors, got {type(out).__name__}; "
                    f"wrap it, e.g. lambda *a: f(*a).x")


def _cast(x: Any, dtype: Optional[torch.dtype]) -> Any:
    if dtype is not None and isinstance(x, Tensor) and x.is_floating_point():
        return x.to(dtype)
    return x


def _max_abs(t: Tensor) -> float:
    return float(t.detach().abs().max()) if t.numel() else 0.0


def _perturbable(x: Any, action: Callable) -> bool:
    named = action in (_act_points, _act_vectors, _act_elements) or getattr(action, "_perturbable", False)
    return named and isinstance(x, Tensor) and x.is_floating_point()


def _perturb(x: Any, action: Callable, group: Any, generator: torch.Generator) -> Any:
    """An independent change of each point, vector, element or feature: no group action.
    Inputs with an invariant or a custom action are left as they are."""
    if not _perturbable(x, action):
        return x
    if action is _act_elements:
        if group is None or not hasattr(group, "random"):
            raise ValueError("the default perturbation of 'elements' inputs needs a LieGroup as group; "
                             "pass perturb=callable(inputs) -> inputs")
        h = group.random(*x.shape[:-2], generator=generator, dtype=x.dtype)
        return x @ h.to(x.device)
    size = max(_max_abs(x), 1.0)
    return x + 0.1 * size * torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)


def equivariance_error(
    f: Callable[..., Any],
    inputs: Sequence[Any],
    group: Any = None,
    actions_in: Union[Action, Sequence[Action]] = "points",
    actions_out: Union[Action, Sequence[Action]] = "invariant",
    *,
    elements: Optional[Tensor] = None,
    num_elements: int = 3,
    seed: int = 0,
    dtype: Optional[torch.dtype] = torch.float64,
    nontrivial: bool = True,
    perturb: Optional[Callable[[Tuple[Any, ...]], Sequence[Any]]] = None,
) -> EquivarianceResult:
    """Measure how far ``f`` is from equivariant; the arguments are those of
    :func:`assert_equivariant` (without the tolerances)."""
    if not callable(f):
        raise TypeError(f"f must be callable, got {type(f).__name__}")
    if not isinstance(inputs, (tuple, list)):
        raise TypeError(f"inputs must be a tuple of f's positional arguments, got {type(inputs).__name__}; "
                        f"for one argument write (x,)")
    inputs = tuple(_cast(x, dtype) for x in inputs)
    if actions_in is None or isinstance(actions_in, str) or callable(actions_in):
        actions_in = (actions_in,) * len(inputs)
    actions_in = tuple(actions_in)
    if len(actions_in) != len(inputs):
        raise ValueError(f"actions_in has {len(actions_in)} entries for {len(inputs)} inputs; give one action "
                         f"per input ('invariant' for edge_index, batch, features)")
    acts_in = [_resolve_action(a, f"actions_in[{i}]") for i, a in enumerate(actions_in)]
    if isinstance(group, str):
        from .groups import get_group
        group = get_group(group)
    if dtype is not None and isinstance(f, torch.nn.Module):
        wrong = {p.dtype for p in f.parameters() if p.is_floating_point() and p.dtype != dtype}
        if wrong:
            raise TypeError(f"f has {sorted(map(str, wrong))} parameters but the check runs in {dtype}: "
                            f"convert it first (module.to({dtype})) or pass dtype=None")
    gen = torch.Generator().manual_seed(seed)
    if elements is None:
        if group is None:
            raise ValueError("pass group= (a name such as 'SE2', a LieGroup or a finite group) or elements=")
        elements = sample_elements(group, num_elements, generator=gen, dtype=dtype or torch.float64)
    if not isinstance(elements, Tensor) or elements.dim() != 3 or elements.shape[-1] != elements.shape[-2]:
        raise ValueError("elements must be a (k, m, m) tensor of group elements, got "
                         f"{tuple(elements.shape) if isinstance(elements, Tensor) else type(elements).__name__}")
    if dtype is not None:
        elements = elements.to(dtype)

    out = _as_outputs(f(*inputs))
    if actions_out is None or isinstance(actions_out, str) or callable(actions_out):
        actions_out = (actions_out,) * len(out)
    actions_out = tuple(actions_out)
    if len(actions_out) != len(out):
        raise ValueError(f"actions_out has {len(actions_out)} entries but f returned {len(out)} outputs")
    acts_out = [_resolve_action(a, f"actions_out[{i}]") for i, a in enumerate(actions_out)]
    scale = max(_max_abs(o) for o in out)

    errors = [0.0] * len(out)
    error, worst = -1.0, 0
    for k in range(elements.shape[0]):
        g = elements[k]
        moved = tuple(act(g.to(x.device) if isinstance(x, Tensor) else g, x) for act, x in zip(acts_in, inputs))
        out_g = _as_outputs(f(*moved))
        if len(out_g) != len(out):
            raise ValueError(f"f returned {len(out_g)} outputs on transformed inputs, {len(out)} before")
        for i, (act, o, og) in enumerate(zip(acts_out, out, out_g)):
            expected = act(g.to(o.device), o.detach())
            if og.shape != expected.shape:  # e.g. an edge list that gained or lost edges
                e = math.inf
            else:
                e = _max_abs(og.detach() - expected) if og.numel() else 0.0
            if math.isnan(e):
                e = math.inf
            errors[i] = max(errors[i], e)
            if e > error:
                error, worst = e, k

    change = None
    if nontrivial:
        if perturb is None:
            if not any(_perturbable(x, a) for x, a in zip(inputs, acts_in)):
                raise ValueError("no input has a named geometric action ('points', 'vectors', 'elements', "
                                 "representation), so there is nothing to perturb by default: pass "
                                 "perturb=callable(inputs) -> inputs or nontrivial=False")
            pgen = torch.Generator().manual_seed(seed + 1)
            perturbed = tuple(_perturb(x, a, group, pgen) for x, a in zip(inputs, acts_in))
        else:
            perturbed = tuple(perturb(inputs))
        out_p = _as_outputs(f(*perturbed))
        change = max((_max_abs(op.detach() - o.detach()) for op, o in zip(out_p, out) if op.shape == o.shape),
                     default=math.inf)
        if math.isnan(change):
            change = math.inf
    return EquivarianceResult(max(error, 0.0), tuple(errors), scale, worst, change)


def _default_tols(dtype: Optional[torch.dtype]) -> Tuple[float, float]:
    if dtype in (torch.float16, torch.bfloat16):
        return 1e-2, 1e-2
    if dtype == torch.float32:
        return 1e-5, 1e-4
    return 1e-10, 1e-9


def assert_equivariant(
    f: Callable[..., Any],
    inputs: Sequence[Any],
    group: Any = None,
    actions_in: Union[Action, Sequence[Action]] = "points",
    actions_out: Union[Action, Sequence[Action]] = "invariant",
    *,
    elements: Optional[Tensor] = None,
    num_elements: int = 3,
    seed: int = 0,
    dtype: Optional[torch.dtype] = torch.float64,
    atol: Optional[float] = None,
    rtol: Optional[float] = None,
    nontrivial: bool = True,
    min_change: float = 1e-3,
    perturb: Optional[Callable[[Tuple[Any, ...]], Sequence[Any]]] = None,
) -> EquivarianceResult:
    """Assert ``f(g . inputs) == g . f(inputs)`` for group elements ``g``, and that this is not trivial.

    Every element ``g`` transforms all inputs at once (one global transformation); each output
    must equal the output's action on ``f(inputs)`` within ``atol + rtol * scale``, ``scale``
    the largest absolute entry of the outputs.

    With ``nontrivial=True`` (the default) ``f`` must also *see* its geometric inputs: every
    input with a named action (``"points"``, ``"vectors"``, ``"elements"``,
    :func:`representation`) is perturbed in a way that is no group action (points, vectors
    and features by independent noise of a tenth of their size, group elements each
    multiplied on the right by its own random element; inputs with invariant or custom
    actions stay as they are, or ``perturb`` replaces all this) and some output must change
    by more than ``min_change * scale``. A model that ignores the positions, for example softmax
    attention over identical features, fails here instead of passing every invariance check.

    Args:
        f: the function or module under test, called as ``f(*inputs)``; returns a Tensor or a
            tuple of Tensors. A module must already be in ``dtype``.
        inputs: ``f``'s positional arguments; floating tensors are converted to ``dtype``.
        group: a name such as ``"SE3"``, a :class:`~pyg_lie.groups.LieGroup`, or a finite
            group of :mod:`pyg_lie.groups`; the elements are drawn from it
            (:func:`sample_elements`). Optional when ``elements`` is given.
        actions_in: one action per input (or one for all): ``"invariant"``/``None``,
            ``"points"``, ``"vectors"``, ``"elements"``, :func:`representation` or a callable
            ``(g, x) -> g . x`` with ``g`` one ``(m, m)`` element.
        actions_out: one action per output (or one for all), as ``actions_in``.
        elements: ``(k, m, m)`` group elements to test instead of random ones (for example a
            finite subgroup under which a lifted model is exactly equivariant).
        num_elements: number of random elements.
        seed: seed of the elements and of the perturbation.
        dtype: dtype of the floating inputs and elements (float64: the check is then exact to
            rounding); ``None`` keeps them as given.
        atol, rtol: tolerance (defaults: ``1e-10, 1e-9`` in float64, ``1e-5, 1e-4`` in float32).
        nontrivial: also assert that the output changes under a non-symmetric perturbation.
        min_change: the smallest change, relative to ``scale``, that counts as seeing the inputs.
        perturb: ``inputs -> perturbed inputs`` replacing the default perturbation.

    Returns:
        The :class:`EquivarianceResult` (errors, scale, change), e.g. to print.

    Raises:
        AssertionError: naming the output, the measured error, the tolerance and the element
            (an output whose shape changes under ``g``, such as an edge list that gains edges,
            has error ``inf``); or, with ``nontrivial``, the measured change.
    """
    res = equivariance_error(f, inputs, group, actions_in, actions_out, elements=elements,
                             num_elements=num_elements, seed=seed, dtype=dtype,
                             nontrivial=nontrivial, perturb=perturb)
    d_atol, d_rtol = _default_tols(dtype if dtype is not None else _first_float_dtype(inputs))
    atol = d_atol if atol is None else atol
    rtol = d_rtol if rtol is None else rtol
    tol = atol + rtol * res.scale
    if not res.error <= tol:
        names_out = actions_out if isinstance(actions_out, (tuple, list)) else (actions_out,) * len(res.errors)
        worst = max(range(len(res.errors)), key=lambda i: res.errors[i])
        raise AssertionError(
            f"not equivariant: output {worst} (action {_action_name(names_out[worst])}) differs from the "
            f"transformed output by {res.error:.3g} (relative to the output scale {res.scale:.3g}: "
            f"{res.error / max(res.scale, 1e-300):.3g}); tolerance atol + rtol * scale = {tol:.3g} "
            f"(atol={atol:g}, rtol={rtol:g}); worst at group element {res.worst_element}; "
            f"errors per output: {', '.join(f'{e:.3g}' for e in res.errors)}")
    if nontrivial and not res.change > min_change * res.scale:
        raise AssertionError(
            f"trivial check: the output changed by only {res.change:.3g} (scale {res.scale:.3g}, required "
            f"> min_change * scale = {min_change * res.scale:.3g}) when the geometric inputs were perturbed "
            f"by no group action, so f does not see them (constant output, or identical features under "
            f"softmax attention); give f inputs it can tell apart, or pass nontrivial=False if that is intended")
    return res


def _first_float_dtype(inputs: Sequence[Any]) -> Optional[torch.dtype]:
    for x in inputs:
        if isinstance(x, Tensor) and x.is_floating_point():
            return x.dtype
    return None


# ------------------------------------------------------------------ dense references
def dense_adjacency(edge_index: Tensor, num_graphs: int, nodes_per_graph: int) -> Tensor:
    """``(B, M, M)`` bool, ``[b, i, j]`` = edge ``j -> i``, from the ``edge_index`` of ``B``
    graphs of ``M`` nodes each, numbered graph by graph."""
    B, M = num_graphs, nodes_per_graph
    adj = torch.zeros(B, M, M, dtype=torch.bool, device=edge_index.device)
    loc = edge_index % M
    adj[edge_index[1] // M, loc[1], loc[0]] = True
    return adj


def dense_model_forward(model, x: Tensor, pos: Tensor, batch: Tensor, adj: Tensor) -> Tensor:
    """``model(x, pos, batch)`` for a :class:`~pyg_lie.models.LieTransformer` on ``B`` clouds
    of equal size, computed as the original LieTransformer code does: the lift, then every
    block's attention over dense ``(B, M, M)`` pair tensors (:func:`dense_lie_self_attention`;
    ``adj (B, M, M)`` the lifted edges), then the mean over each cloud. Returns
    ``(B, out_channels)``."""
    B, M = adj.shape[0], adj.shape[1]
    lifted = model.lift(x, pos, batch)
    h = model.embed(lifted.x).view(B, M, -1)
    g = lifted.g.view(B, M, *lifted.g.shape[1:])
    for blk in model.blocks:
        h = h + dense_lie_self_attention(blk.attn, blk.norm1(h), g, adj)
        h = h + blk.mlp(blk.norm2(h))
    return model.head(model.norm(h).mean(1))


def dense_lie_self_attention(layer, x: Tensor, g: Tensor, adj: Tensor,
                             invariants: Optional[Tensor] = None) -> Tensor:
    r"""A :class:`~pyg_lie.nn.LieSelfAttention` computed densely over all pairs.

    Uses ``layer``'s parameters; supports ``content="dot_product"``, ``location="mlp"`` and
    ``combine in {"additive", "multiplicative"}``.

    Args:
        layer: the layer whose parameters are used.
        x: ``(B, M, C)`` lifted features of ``B`` equally sized clouds.
        g: ``(B, M, m, m)`` group elements.
        adj: ``(B, M, M)`` bool, ``adj[b, i, j]`` = edge ``j -> i`` (:func:`dense_adjacency`).
        invariants: ``(B, M, k)`` orbit invariants or ``None``.

    Returns:
        ``(B, M, C_out)``; memory and time ``O(B M^2 (H + kernel_dim))``.
    """
    if layer.content != "dot_product" or layer.location != "mlp" or layer.combine == "mlp":
        raise ValueError("the dense reference implements content='dot_product', location='mlp' and "
                         "combine='additive' or 'multiplicative' only")
    B, M, _ = x.shape
    H, D = layer.heads, layer.head_dim
    q = layer.lin_q(x).view(B, M, H, D)
    k = layer.lin_k(x).view(B, M, H, D)
    v = layer.lin_v(x).view(B, M, H, D)
    G = layer.group
    rel = G.log(G.between(g.unsqueeze(2), g.unsqueeze(1)))  # [b, i, j] = log(g_i^-1 g_j)
    if layer.invariant_dim > 0:
        kk = invariants.size(-1)
        rel = torch.cat([rel, invariants.unsqueeze(2).expand(B, M, M, kk),
                         invariants.unsqueeze(1).expand(B, M, M, kk)], -1)
    kl = layer.loc_mlp(rel.to(x.dtype))  # (B, M, M, H)
    kc = torch.einsum("bihd,bjhd->bijh", q, k) / math.sqrt(D)
    score = kc + kl if layer.combine == "additive" else kc * kl
    mask = adj.unsqueeze(-1)
    if layer.normalization == "softmax":
        w = score.masked_fill(~mask, float("-inf")).softmax(dim=2)
        w = torch.nan_to_num(w, nan=0.0)
    else:
        deg = adj.sum(2, keepdim=True).clamp(min=1).unsqueeze(-1)
        w = score * mask / deg
    out = torch.einsum("bijh,bjhd->bihd", w, v).reshape(B, M, H * D)
    return layer.lin_out(out)


@contextlib.contextmanager
def explainer_mask(module: torch.nn.Module, mask: Tensor, edge_index: Tensor, apply_sigmoid: bool = False):
    """PyG's Explainer edge mask ``mask (E,)`` for ``edge_index (2, E)`` set on every
    ``MessagePassing`` layer of ``module`` inside the block, cleared after it (as an Explainer
    does around its forward passes)."""
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
    set_masks(module, mask, edge_index, apply_sigmoid=apply_sigmoid)
    try:
        yield module
    finally:
        clear_masks(module)
