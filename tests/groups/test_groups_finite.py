"""Finite subgroups Cn, Dn (in O(2)) and the polyhedral rotation groups (in SO(3))."""
from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from pyg_lie.groups import SE3, SO2, SO3, Cn, Dn, Icosahedral, Octahedral, Tetrahedral

F64 = torch.float64
ALL = [Cn(1), Cn(2), Cn(5), Cn(8), Dn(1), Dn(2), Dn(3), Dn(6), Tetrahedral(), Octahedral(), Icosahedral()]
ORDERS = [1, 2, 5, 8, 2, 4, 6, 12, 12, 24, 60]


def _in_set(M: torch.Tensor, E: torch.Tensor, atol=1e-10) -> torch.Tensor:
    """For each matrix in M (..., m, m), whether it equals some element of E (K, m, m)."""
    d = (M.unsqueeze(-3) - E).abs().amax((-1, -2))
    return (d < atol).any(-1)


@pytest.mark.parametrize("G,order", list(zip(ALL, ORDERS)), ids=[repr(G) for G in ALL])
def test_group_structure(G, order):
    E = G.elements(F64)
    m = G.matrix_size
    assert G.order == order == len(G) and E.shape == (order, m, m)
    assert torch.equal(E[0], torch.eye(m, dtype=F64))  # identity first
    # orthogonal
    torch.testing.assert_close(E @ E.transpose(-1, -2), torch.eye(m, dtype=F64).expand(order, m, m),
                               rtol=0, atol=1e-14)
    # no duplicates
    d = (E.unsqueeze(0) - E.unsqueeze(1)).abs().amax((-1, -2)) + 10 * torch.eye(order, dtype=F64)
    assert d.min() > 0.1
    # closed under multiplication and inverses
    P = E.unsqueeze(0) @ E.unsqueeze(1)
    assert bool(_in_set(P.reshape(-1, m, m), E).all())
    assert bool(_in_set(E.transpose(-1, -2), E).all())
    T = G.multiplication_table()
    assert T.shape == (order, order) and bool((T >= 0).all())
    torch.testing.assert_close(E[T], P.transpose(0, 1), rtol=0, atol=1e-12)
    # every row of the Cayley table is a permutation (Latin square)
    assert all(sorted(row.tolist()) == list(range(order)) for row in T)
    inv = G.inverse_indices()
    torch.testing.assert_close(E[inv] @ E, torch.eye(m, dtype=F64).expand(order, m, m), rtol=0, atol=1e-12)
    # deterministic, dtype/device handling
    assert torch.equal(G.elements(F64), type(G)(*([G.n] if hasattr(G, "n") else [])).elements(F64))
    assert G.elements().dtype == torch.float32
    assert G.elements(device="cpu").device.type == "cpu"
    # the generators generate the whole group (closure computed here independently)
    gens = G.generators(F64)
    span = torch.eye(m, dtype=F64).unsqueeze(0)
    while True:
        new = (span.unsqueeze(1) @ gens.unsqueeze(0)).reshape(-1, m, m)
        new = new[~_in_set(new, span)]
        if len(new) == 0:
            break
        span = torch.cat([span, _unique(new)])
    assert len(span) == order and bool(_in_set(span, E).all())


def _unique(M: torch.Tensor) -> torch.Tensor:
    keep = []
    for A in M:
        if not keep or not bool(_in_set(A, torch.stack(keep))):
            keep.append(A)
    return torch.stack(keep)


@pytest.mark.parametrize("n", [1, 3, 4, 7])
def test_cn_elements(n):
    E = Cn(n).elements(F64)
    angles = torch.atan2(E[:, 1, 0], E[:, 0, 0]) % (2 * math.pi)
    torch.testing.assert_close(angles, 2 * math.pi * torch.arange(n, dtype=F64) / n, rtol=0, atol=1e-12)
    assert Cn(n).name == f"C{n}"
    torch.testing.assert_close(torch.linalg.det(E), torch.ones(n, dtype=F64))
    if n == 4:  # nice values are exact
        assert torch.equal(E[1], torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=F64))


@pytest.mark.parametrize("n", [1, 2, 5, 6])
def test_dn_elements(n):
    G = Dn(n)
    E = G.elements(F64)
    assert G.name == f"D{n}"
    # documented order: n rotations (Cn's elements) then the n reflections r_k diag(1, -1)
    torch.testing.assert_close(E[:n], Cn(n).elements(F64))
    det = torch.linalg.det(E)
    torch.testing.assert_close(det, torch.cat([torch.ones(n), -torch.ones(n)]).to(F64))
    flip = torch.diag(torch.tensor([1.0, -1.0], dtype=F64))
    torch.testing.assert_close(E[n:], E[:n] @ flip)
    # reflection k fixes the line at angle pi k / n
    for k in range(n):
        a = math.pi * k / n
        v = torch.tensor([math.cos(a), math.sin(a)], dtype=F64)
        torch.testing.assert_close(E[n + k] @ v, v)
    torch.testing.assert_close(E[n:] @ E[n:], torch.eye(2, dtype=F64).expand(n, 2, 2), rtol=0, atol=1e-14)


def _element_orders(E: torch.Tensor) -> Counter:
    orders = Counter()
    eye = torch.eye(E.shape[-1], dtype=E.dtype)
    for M in E:
        P, k = M.clone(), 1
        while not torch.allclose(P, eye, atol=1e-9):
            P, k = P @ M, k + 1
        orders[k] += 1
    return orders


@pytest.mark.parametrize("G,census", [
    (Tetrahedral(), {1: 1, 2: 3, 3: 8}),
    (Octahedral(), {1: 1, 2: 9, 3: 8, 4: 6}),
    (Icosahedral(), {1: 1, 2: 15, 3: 20, 5: 24}),
], ids=["T", "O", "I"])
def test_polyhedral_element_orders(G, census):
    """Census of element orders: identifies A_4, S_4 and A_5 among groups of these orders."""
    E = G.elements(F64)
    torch.testing.assert_close(torch.linalg.det(E), torch.ones(G.order, dtype=F64))
    assert dict(_element_orders(E)) == census
    # rotation angles are multiples of 2 pi / order
    angles = SO3().angle(E)
    allowed = torch.tensor([0, 2 * math.pi / 5, math.pi / 2, 2 * math.pi / 3, 4 * math.pi / 5, math.pi],
                           dtype=F64)
    assert ((angles.unsqueeze(-1) - allowed).abs().min(-1).values < 1e-12).all()


def test_dn_element_orders():
    assert dict(_element_orders(Dn(6).elements(F64))) == {1: 1, 2: 7, 3: 2, 6: 2}


def test_subgroup_relations():
    assert Tetrahedral().is_subgroup_of(Octahedral())
    assert Tetrahedral().is_subgroup_of(Icosahedral())
    assert not Octahedral().is_subgroup_of(Icosahedral())
    assert not Icosahedral().is_subgroup_of(Octahedral())
    assert Cn(3).is_subgroup_of(Cn(6)) and not Cn(4).is_subgroup_of(Cn(6))
    assert Cn(3).is_subgroup_of(Dn(3)) and Dn(2).is_subgroup_of(Dn(4)) and not Dn(4).is_subgroup_of(Cn(8))
    assert not Dn(2).is_subgroup_of(Dn(3))
    assert Cn(5).is_subgroup_of(SO2()) and not Dn(5).is_subgroup_of(SO2())
    assert Octahedral().is_subgroup_of(SO3()) and not Octahedral().is_subgroup_of(SO2())
    assert not Cn(2).is_subgroup_of(Octahedral())
    with pytest.raises(TypeError):
        Cn(2).is_subgroup_of("C4")


def test_index_of_and_repr():
    E = Octahedral().elements()
    torch.testing.assert_close(Octahedral().index_of(E), torch.arange(24))
    assert int(Octahedral().index_of(torch.diag(torch.tensor([1.0, 1.0, -1.0])))) == -1
    assert repr(Cn(4)) == "Cn(4)" and repr(Icosahedral()) == "Icosahedral()"
    assert Cn(4) == Cn(4) and Cn(4) != Cn(3) and Cn(2) != Dn(1)
    assert len({Cn(4), Cn(4), Dn(4)}) == 2


@pytest.mark.parametrize("bad", [0, -3, 2.5, "4", True])
def test_invalid_n(bad):
    with pytest.raises(ValueError, match="n must be a positive int"):
        Cn(bad)
    with pytest.raises(ValueError, match="n must be a positive int"):
        Dn(bad)


@pytest.mark.parametrize("G", [Tetrahedral(), Octahedral(), Icosahedral()], ids=repr)
def test_se3_lift_with_polyhedral_subgroup(G):
    x = torch.randn(7, 3, dtype=F64, generator=torch.Generator().manual_seed(0))
    L = SE3().lift(x, subgroup=G.elements())
    assert L.shape == (7, G.order, 4, 4) and L.dtype == F64
    torch.testing.assert_close(SE3().act(L, SE3().origin(F64)), x[:, None].expand(7, G.order, 3))
    # all lifts of a point are distinct, and their rotation parts are exactly the subgroup
    d = (L.unsqueeze(1) - L.unsqueeze(2)).abs().amax((-1, -2)) + 10 * torch.eye(G.order, dtype=F64)
    assert d.min() > 0.1
    torch.testing.assert_close(L[:, :, :3, :3], G.elements(F64).expand(7, -1, -1, -1))
    # left action by g in SE3 moves lifts of x to lifts of g x (same subgroup coset)
    g = SE3().random(dtype=F64, generator=torch.Generator().manual_seed(1))
    Lg = SE3().lift(SE3().act(g, x), subgroup=G.elements())
    rel = SE3().between(Lg, g @ L)  # = (s(gx) h)^-1 g s(x) h': pure rotations R^T-conjugated
    torch.testing.assert_close(rel[..., :3, 3], torch.zeros_like(rel[..., :3, 3]))


def test_so3_lift_with_cyclic_subgroup():
    x = torch.randn(5, 3, dtype=F64, generator=torch.Generator().manual_seed(2))
    L = SO3().lift(x, subgroup=Cn(6).elements())
    assert L.shape == (5, 6, 3, 3)
    nx = x / x.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(SO3().act(L, SO3().origin(F64)), nx[:, None].expand(5, 6, 3))
    d = (L.unsqueeze(1) - L.unsqueeze(2)).abs().amax((-1, -2)) + 10 * torch.eye(6, dtype=F64)
    assert d.min() > 0.1


def test_elements_are_copies():
    E = Octahedral().elements(F64)
    E.zero_()
    assert torch.equal(Octahedral().elements(F64)[0], torch.eye(3, dtype=F64))
    G = Cn(3).generators(F64)
    G.zero_()
    assert Cn(3).generators(F64).abs().sum() > 0


# ------------------------------------------------------- one model of C_n / D_n (index algebra)
O2 = [Cn(1), Cn(2), Cn(4), Cn(5), Cn(6), Dn(1), Dn(2), Dn(3), Dn(4), Dn(6)]


@pytest.mark.parametrize("G", O2, ids=repr)
def test_o2_index_algebra_matches_the_matrices(G):
    """The closed-form products, inverses, pairs and words of Cn / Dn are those of the matrices."""
    E = G.elements(F64)
    flip = torch.diag(torch.tensor([1.0, -1.0], dtype=F64))
    for i, (f, k) in enumerate(G.pairs):
        assert G.pair_index(f, k) == i
        R = Cn(G.n).elements(F64)[k]
        torch.testing.assert_close(E[i], R @ flip if f else R, rtol=0, atol=1e-14)
        assert torch.equal(torch.as_tensor(G.plane_matrix(i)), E[i])
    T = G.multiplication_table().tolist()
    inv = G.inverse_indices().tolist()
    assert [[G.mul(a, b) for b in range(G.order)] for a in range(G.order)] == T
    assert [G.inv(a) for a in range(G.order)] == inv
    assert G.generator_indices == G.index_of(G.generators(F64)).tolist()
    assert G.closure(G.generator_indices) == list(range(G.order))
    assert G.word("r") == (1 % G.n) and G.word(f"r^{G.n}") == 0 and G.word("r^-1") == G.inv(G.word("r"))
    if G.dihedral:
        t, r = G.word("t"), G.word("r")
        assert t == G.n and G.word("tr") == G.mul(t, r) and G.mul(t, r) == G.mul(G.inv(r), t)
    else:
        with pytest.raises(ValueError, match="reflection"):
            G.word("t")


@pytest.mark.parametrize("G", [Tetrahedral(), Octahedral()], ids=repr)
def test_generic_index_algebra_from_the_tables(G):
    E = G.elements(F64)
    a, b = 5, 7
    torch.testing.assert_close(E[G.mul(a, b)], E[a] @ E[b], rtol=0, atol=1e-12)
    torch.testing.assert_close(E[G.inv(a)], E[a].T, rtol=0, atol=1e-12)
    assert G.closure(G.generator_indices) == list(range(G.order))
    assert len(G.closure([G.mul(a, a)])) < G.order


def test_o2_subgroup_embedding_is_a_homomorphism_into_the_same_matrices():
    G = Dn(4)
    for H in (Cn(4), Dn(2), Cn(2), Dn(1), Cn(1)):
        emb = G.subgroup_embedding(H)
        torch.testing.assert_close(G.elements(F64)[emb], H.elements(F64), rtol=0, atol=1e-14)
        for a in range(H.order):
            for b in range(H.order):
                assert emb[H.mul(a, b)] == G.mul(emb[a], emb[b])
    with pytest.raises(ValueError, match="not a subgroup"):
        Cn(4).subgroup_embedding(Dn(2))
    with pytest.raises(ValueError, match="not a subgroup"):
        Dn(4).subgroup_embedding(Cn(3))


def test_finite_group_by_name_and_the_vit_uses_the_same_model():
    from pyg_lie.groups import finite_group
    from pyg_lie.groups.finite import o2_group
    from pyg_lie.vit import FieldType, get_group

    assert finite_group("D4") is finite_group("d4") and finite_group("D4") == Dn(4)
    assert isinstance(finite_group("C6"), Cn) and finite_group("octahedral") == Octahedral()
    G = Dn(3)
    assert finite_group(G) is G and o2_group(G) is G
    assert get_group("D4") is finite_group("D4")
    V = FieldType.regular("D4", 2)
    assert isinstance(V.group, Dn) and V.group == Dn(4)
    with pytest.raises(ValueError, match="'C4' or 'D6'"):
        finite_group("E8")
    with pytest.raises(ValueError, match="'C4' or 'D6'"):
        finite_group("C0")
    with pytest.raises(TypeError, match="group"):
        finite_group(4)
    with pytest.raises(ValueError, match="cyclic or dihedral"):
        o2_group("Tetrahedral")
    with pytest.raises(ValueError, match="cyclic or dihedral"):
        FieldType.regular(Octahedral(), 1)
    from pyg_lie.groups import FiniteO2Group
    with pytest.raises(TypeError, match="Cn"):
        FiniteO2Group(4)
