"""Restriction to subgroups (the paper's Theorem 2 and Lemma 2).

For ``H <= G`` (standard embedding: ``r_H -> r^{n/m}``, ``t_H -> t``) every
``G``-irrep restricts to a sum of ``H``-irreps; :func:`restriction_matrix` builds the
``H``-equivariant isometry ``Res: V -> W``. :func:`restrict_model` transports every
weight of an :class:`~pyg_lie.models.EquivariantViT` (``A -> Res' A Res^T``, biases
``b -> Res' b``, MLP hidden spaces by ``FT_H o FT_G^{-1}`` on the same G-set viewed as an
``H``-set) and re-expresses it in the ``H``-Schur parametrisation, checking that the
projection residual vanishes.
"""
from __future__ import annotations

from typing import Sequence, Union

import numpy as np
import torch

from .field_type import FieldType
from .irreps import FiniteO2Group, get_group, intertwiners

__all__ = ["restriction_matrix", "irrep_restriction", "restrict_model"]


def irrep_restriction(G: FiniteO2Group, H: FiniteO2Group, embedding: Sequence[int]) -> dict[str, list]:
    """``{rho: [(sigma, M)]}`` with ``M`` ``(d_rho, d_sigma)``, ``rho(e(h)) M = M sigma(h)``,
    columns of all pieces forming an orthonormal basis of ``V_rho`` (first non-zero
    entry of each column positive, so trivial-to-trivial pieces are ``+1``)."""
    out = {}
    gens = H.generators
    for rho in G.irreps:
        pis = np.stack([rho.matrix(*G.elements[embedding[h]]) for h in gens])
        pieces = []
        for sigma in H.irreps:
            sm = np.stack([sigma.matrix(*H.elements[h]) for h in gens])
            for M in intertwiners(pis, sigma, sm):
                first = M.reshape(-1)[np.argmax(np.abs(M.reshape(-1)) > 1e-9)]
                pieces.append((sigma.name, M * np.sign(first)))
        if sum(M.shape[1] for _, M in pieces) != rho.dim:
            raise RuntimeError(f"restriction of {rho.name} to {H.name} is incomplete")
        out[rho.name] = pieces
    return out


def restriction_matrix(V: FieldType, H: Union[str, FiniteO2Group], embedding: Sequence[int] = None):
    """``(W, R, source)``: ``W`` the ``H``-field type of ``V``, ``R`` the ``(W.dim, V.dim)``
    orthogonal matrix with ``R rho_V(e(h)) = rho_W(h) R``, and ``source[sigma]`` the
    ``(irrep index, channel)`` of ``V`` that each ``W``-channel of ``sigma`` comes from."""
    G = V.group
    H = get_group(H) if isinstance(H, str) else H
    if embedding is None:
        embedding = G.subgroup_embedding(H)
    res = irrep_restriction(G, H, embedding)
    rows: dict[str, list] = {s.name: [] for s in H.irreps}  # per sigma: list of (src, M, slice)
    for i, (rho, C, sl) in enumerate(V.blocks):
        for c in range(C):
            cols = slice(sl.start + c * rho.dim, sl.start + (c + 1) * rho.dim)
            for sname, M in res[rho.name]:
                rows[sname].append(((i, c), M, cols))
    W = FieldType(H, {k: len(v) for k, v in rows.items()})
    R = np.zeros((W.dim, V.dim))
    source = {}
    for sigma, C, sl in W.blocks:
        source[sigma.name] = [src for src, _, _ in rows[sigma.name]]
        for cp, (_, M, cols) in enumerate(rows[sigma.name]):
            R[sl.start + cp * sigma.dim: sl.start + (cp + 1) * sigma.dim, cols] = M.T
    return W, R, source


@torch.no_grad()
def restrict_model(model, subgroup: Union[str, FiniteO2Group], tol: float = 1e-5):
    """Theorem 2 for :class:`~pyg_lie.models.EquivariantViT`: the ``H``-model computing
    the same logits (and the same backbone features up to ``Res``)."""
    from ..models.equivariant_vit import EquivariantViT
    from .nonlinearity import synthesis_matrix

    G = model.group
    H = get_group(subgroup) if isinstance(subgroup, str) else subgroup
    if G.n % H.n != 0 or (H.dihedral and not G.dihedral):
        raise ValueError(f"subgroup: {H.name} is not a subgroup of {G.name} (need n | {G.n}"
                         f"{'' if G.dihedral else ' and a cyclic subgroup'})")
    emb = G.subgroup_embedding(H)
    V = model.field_type
    W, Rn, source = restriction_matrix(V, H, emb)
    gset_H = model.gset.restrict(H, emb)
    # attention heads and invariantization follow the G channels
    first_attn = model.blocks[0].attn if len(model.blocks) else None
    head_ids = None
    if first_attn is not None:
        head_ids = [[first_attn.head_ids[i][c] for (i, c) in source[s.name]] for s in H.irreps]
    values, groups = model._invariant_groups
    sup = [set(np.nonzero(np.abs(Rn[:, j]) > 1e-9)[0].tolist()) for j in range(V.dim)]
    new_values = []
    for f in values:
        (row,) = sup[f]
        new_values.append(row)
    new_groups = [sorted(set().union(*[sup[f] for f in g])) for g in groups]
    cfg = dict(model.config)
    cfg.update(group=H, mlp_gset=gset_H, field_type=W, _head_ids=head_ids, _invariant_groups=(new_values, new_groups))
    new = EquivariantViT(**cfg)
    ref = next(model.parameters())
    new = new.to(device=ref.device, dtype=ref.dtype)
    dev = ref.device
    R = torch.as_tensor(Rn, dtype=torch.float64, device=dev)
    resid = []

    def load(lin, M, b, Rout, Rin):
        resid.append(lin.load_dense(Rout @ M.double() @ Rin.T, None if b is None else Rout @ b.double()))

    # patch embedding: dense filters F -> R F, re-expanded in the H orbit basis of C(U)
    pe, pe_new = model.patch_embed, new.patch_embed
    F_G = pe.filters().double()
    b = pe.linear.dense_bias()
    resid.append(pe_new.linear.load_dense(R @ F_G @ pe_new.basis.double().T, None if b is None else R @ b.double()))
    resid.append(new.pos.load_encoding(model.pos.encoding().double() @ R.T))
    cls = torch.zeros(V.dim, dtype=torch.float64, device=dev)
    cls[: model.cls_token.numel()] = model.cls_token.double()
    cls_W = R @ cls
    Ct = new.cls_token.numel()
    new.cls_token.copy_(cls_W[:Ct])
    resid.append(float(cls_W[Ct:].norm()))

    ch_src = [None] * sum(len(v) for v in source.values())
    G_ch_off = np.cumsum([0] + [C for _, C, _ in V.blocks])
    k = 0
    for s in H.irreps:
        for (i, c) in source[s.name]:
            ch_src[k] = int(G_ch_off[i] + c)
            k += 1
    ch_src_t = torch.as_tensor(ch_src, device=dev)
    triv_src = [j for j, (i, c) in enumerate(source[H.irreps[0].name]) if i == 0]

    def load_norm(nrm, nrm_new):
        if nrm.weight is not None:
            nrm_new.weight.copy_(nrm.weight[ch_src_t])
        if nrm.bias is not None:
            nrm_new.bias.zero_()
            for j in triv_src:
                nrm_new.bias[j] = nrm.bias[source[H.irreps[0].name][j][1]]

    for blk, nb in zip(model.blocks, new.blocks):
        load_norm(blk.norm1, nb.norm1)
        load_norm(blk.norm2, nb.norm2)
        for name in ("q", "k", "v", "o"):
            lin = getattr(blk.attn, name)
            load(getattr(nb.attn, name), lin.dense_weight(), lin.dense_bias(), R, R)
        J = synthesis_matrix(nb.act).T @ synthesis_matrix(blk.act)  # FT_H o FT_G^-1: V'_G -> V'_H
        load(nb.mlp_in, blk.mlp_in.dense_weight(), blk.mlp_in.dense_bias(), J, R)
        load(nb.mlp_out, blk.mlp_out.dense_weight(), blk.mlp_out.dense_bias(), R, J)
    load_norm(model.norm, new.norm)
    new.head.load_state_dict(model.head.state_dict())
    worst = max(resid) if resid else 0.0
    if worst > tol:
        raise RuntimeError(f"restriction to {H.name} failed: Schur projection residual {worst:.2e}")
    return new.train(model.training)
