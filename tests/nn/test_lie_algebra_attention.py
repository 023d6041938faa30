"""Lie-algebra attention (layer, transformer, data set): equivariance, parameter
counts, chart handling, batching, gradients, compile, a short training run."""
from __future__ import annotations

import math

import pytest
import torch

from pyg_lie.groups import GROUPS, SE2, get_group
from pyg_lie.nn.lie_algebra_attention import LieAlgebraAttention, relative_log
from pyg_lie.models import LieAlgebraTransformer, VectorTokenTransformer
from pyg_lie.models.lie_algebra_losses import completion_loss, equivariance_error, pose_error
from pyg_lie.neighbors import complete_graph, log_knn_graph, log_radius_graph
from pyg_lie.datasets.lie_sequence import LieSequenceCompletion

ALL_GROUPS = ["SO2", "SE2", "SO3", "SE3", "Aff2", "Aff3"]
D = torch.float64


def _group(name):
    if name not in GROUPS:
        pytest.skip(f"{name} is not available in pyg_lie.groups yet")
    return get_group(name)


def _randomise_heads(model, gen_seed=1):
    """Non-zero output heads, so that outputs and pooling are not trivial."""
    gen = torch.Generator().manual_seed(gen_seed)
    with torch.no_grad():
        for lin in (model.head_delta, model.head_weight):
            lin.weight.copy_(0.05 * torch.randn(lin.weight.shape, generator=gen, dtype=lin.weight.dtype))
        for mlp in (model.head_edge, model.head_pair):
            if mlp is not None:
                last = mlp[-1]
                last.weight.copy_(0.1 * torch.randn(last.weight.shape, generator=gen, dtype=last.weight.dtype))
    return model


def _sequences(G, n=3, length=8, seed=0):
    data = LieSequenceCompletion(G, n, length=length, seed=seed).batch_all()
    return data.g, data.batch, data


# ------------------------------------------------------------------ equivariance
@pytest.mark.parametrize("score", ["closed_form", "mlp"])
@pytest.mark.parametrize("name", ALL_GROUPS)
def test_model_equivariance_float64(name, score):
    G = _group(name)
    torch.manual_seed(0)
    model = _randomise_heads(LieAlgebraTransformer(G, score=score).to(D)).eval()
    g, batch, _ = _sequences(G, n=2)
    a = G.random(2, generator=torch.Generator().manual_seed(3), dtype=D)
    out = model(g, batch=batch)
    out_a = model(G.compose(a[batch], g), batch=batch)
    # hidden states are invariant, per-token outputs and the completion equivariant
    assert (out.h - out_a.h).abs().max() < 1e-10
    assert (G.compose(a[batch], out.g) - out_a.g).abs().max() < 1e-12
    err = pose_error(G, out_a.prediction, G.compose(a, out.prediction))
    assert err.max() < 1e-12, (name, score, err)
    # the proposals really moved (the test is not trivially satisfied)
    assert (out.g - g).abs().max() > 1e-3


@pytest.mark.parametrize("score,head", [("closed_form", "pair"), ("mlp", "pair"), ("closed_form", "midpoint")])
@pytest.mark.parametrize("name", ALL_GROUPS)
def test_pair_head_equivariance_float64(name, score, head):
    G = _group(name)
    torch.manual_seed(0)
    model = _randomise_heads(LieAlgebraTransformer(G, score=score, head=head).to(D)).eval()
    g, batch, _ = _sequences(G, n=2)
    a = G.random(2, generator=torch.Generator().manual_seed(3), dtype=D)
    out, out_a = model(g, batch=batch), model(G.compose(a[batch], g), batch=batch)
    assert (G.compose(a[batch[out.pair_index[1]]], out.pair_g) - out_a.pair_g).abs().max() < 1e-12
    assert pose_error(G, out_a.prediction, G.compose(a, out.prediction)).max() < 1e-12
    # the selection is not uniform, so the check is not trivially satisfied
    assert out.pair_weight.std() > 0.01 * out.pair_weight.mean()


@pytest.mark.parametrize("head", ["pair", "midpoint"])
@pytest.mark.parametrize("name", ALL_GROUPS)
def test_pair_head_interpolates_the_gap_exactly(name, head):
    """With only the two neighbours of the gap, the pair head at initialisation (c = 1/2)
    and the midpoint head return their geodesic midpoint, which is the missing element
    of g_k = g_0 exp(k xi)."""
    G = _group(name)
    model = _randomise_heads(LieAlgebraTransformer(G, head=head).to(D)).eval()
    if head == "pair":  # c = 1/2 exactly
        torch.nn.init.zeros_(model.head_pair[-1].weight)
    for d in LieSequenceCompletion(G, 3, seed=5, dtype=D):
        m = int(d.missing)
        pos = d.order.tolist()
        pair = d.g[[pos.index(m - 1), pos.index(m + 1)]]
        pred = model(pair).prediction[0]
        assert pose_error(G, pred[None], d.target).max() < 1e-12
        # midpoint property, independent of how the head computes it: g_a^-1 p = p^-1 g_b
        assert (G.between(pair[0], pred) - G.between(pred, pair[1])).abs().max() < 1e-12


def test_pair_head_batching_and_short_sequences():
    G = SE2()
    ds = LieSequenceCompletion(G, 3, length=(4, 9), seed=2, dtype=D)
    model = _randomise_heads(LieAlgebraTransformer(G, head="pair").to(D)).eval()
    from torch_geometric.data import Batch
    data = Batch.from_data_list(list(ds))
    out = model(data.g, batch=data.batch)
    for b, d in enumerate(ds):
        assert torch.allclose(model(d.g).prediction[0], out.prediction[b], atol=1e-12)
    # the selection logits are bounded: weight ratios within a sequence <= e^(2 b)
    g6 = G.random(6, generator=torch.Generator().manual_seed(0), dtype=D)
    with torch.no_grad():  # rescale the raw selection logits to mean 0, std 10
        out = model(g6)
        j, i = out.pair_index  # pair j -> i
        loop = i == j
        w_ij = G.log(G.between(g6[i], g6[j]))
        raw = model._pair_mlp(model.head_pair, out.h, out.pair_index, w_ij)[~loop, 0]
        k, last = 10.0 / float(raw.std()), model.head_pair[-1]
        last.weight[0].mul_(k)
        last.bias[0] = k * (last.bias[0] - raw.mean())
    model.pair_logit_bound = 1.0
    w = model(g6).pair_weight
    assert bool((w[loop] == 0).all())  # self loops never propose
    w = w[~loop]
    assert float(w.max() / w.min()) <= math.exp(2.0) * (1 + 1e-9)
    assert float(w.max() / w.min()) > 2.0  # the bound is what limits it
    with pytest.raises(ValueError, match="at least 2 tokens"):
        model(G.random(3, dtype=D), batch=torch.tensor([0, 1, 1]))
    with pytest.raises(ValueError, match="head must be"):
        LieAlgebraTransformer(G, head="nearest")


def test_vector_baseline_is_not_equivariant():
    G = SE2()
    torch.manual_seed(0)
    g, batch, _ = _sequences(G, n=4)
    eG = equivariance_error(_randomise_heads(LieAlgebraTransformer(G).to(D)).eval(), g, batch,
                            generator=torch.Generator().manual_seed(0))
    eA = equivariance_error(_randomise_heads(VectorTokenTransformer(G).to(D)).eval(), g, batch,
                            generator=torch.Generator().manual_seed(0))
    assert eG.max() < 1e-12
    assert eA.mean() > 1e-3
    assert eA.mean() > 1e6 * eG.mean().clamp(min=1e-300)


@pytest.mark.parametrize("name", ["SE2", "SO3", "Aff2"])
def test_cocycle_of_outputs(name):
    """p_i^-1 p_j computed from invariants alone, exp(-d_i) exp(w_ij) exp(d_j), composes."""
    G = _group(name)
    model = _randomise_heads(LieAlgebraTransformer(G).to(D)).eval()
    g, batch, _ = _sequences(G, n=1)
    out = model(g, batch=batch)
    n = g.shape[0]
    ei = complete_graph(batch)
    w, _ = relative_log(G, g, ei)
    W = torch.zeros(n, n, G.dim, dtype=D)
    W[ei[1], ei[0]] = w  # W[i, j] = log(g_i^-1 g_j)
    E, Einv = G.exp(out.delta), G.exp(-out.delta)
    R = Einv[:, None] @ G.exp(W) @ E[None]  # (n, n, m, m)
    direct = G.between(out.g[:, None], out.g[None])
    assert (R - direct).abs().max() < 1e-10
    i, j, k = 0, 3, 5
    assert (R[i, j] @ R[j, k] - R[i, k]).abs().max() < 1e-10


# ------------------------------------------------------------- parameter counts
@pytest.mark.parametrize("name,closed,mlp", [("SE2", 36, 1932), ("SO3", 24, 1932), ("Aff2", 60, 3084),
                                             ("SO2", 24, 1164)])
def test_score_parameter_counts_match_paper(name, closed, mlp):
    G = _group(name)
    assert LieAlgebraTransformer(G, score="closed_form").num_score_parameters() == closed
    assert LieAlgebraTransformer(G, score="mlp").num_score_parameters() == mlp
    layer = LieAlgebraAttention(8, 4, G, heads=4)
    assert torch.allclose(layer.block_weights, torch.full((4, len(G.blocks)), math.log(2.0)))
    assert torch.allclose(layer.temperature, torch.full((4,), math.log(2.0)))


# ---------------------------------------------------------------- layer basics
def test_layer_closed_form_score_by_hand_and_attention():
    G = SE2()
    layer = LieAlgebraAttention(5, 6, G, heads=2).to(D)  # out_channels: the output width, 3 per head
    with torch.no_grad():
        layer.lambda_raw.copy_(torch.tensor([[0.3, -1.0], [2.0, 0.5]]))
        layer.tau_raw.copy_(torch.tensor([0.1, -0.4]))
    g = G.random(4, dtype=D)
    ei = complete_graph(torch.zeros(4, dtype=torch.long))
    h = torch.randn(4, 5, dtype=D)
    out, (ei_out, alpha) = layer(h, ei, g, return_attention_weights=True)
    assert out.shape == (4, 6) and alpha.shape == (ei.shape[1], 2)
    # independent evaluation with scipy's logm
    import scipy.linalg
    sp = torch.nn.functional.softplus
    lam, tau = sp(layer.lambda_raw), sp(layer.tau_raw)
    for e in range(ei.shape[1]):
        j, i = int(ei[0, e]), int(ei[1, e])
        L = torch.from_numpy(scipy.linalg.logm((torch.linalg.inv(g[i]) @ g[j]).numpy()).real)
        t2, th2 = float(L[0, 2] ** 2 + L[1, 2] ** 2), float(L[1, 0] ** 2 + L[0, 1] ** 2)
        s = -(lam[:, 0] * t2 + lam[:, 1] * th2) / tau
        if e == 0:
            s_all = []
        s_all.append(s)
    s_all = torch.stack(s_all)
    ref = torch.stack([torch.softmax(s_all[ei[1] == i], 0) for i in range(4)])  # edges grouped by target
    got = torch.stack([alpha[ei[1] == i] for i in range(4)])
    assert torch.allclose(got, ref, atol=1e-10)
    # value pathway: out_i = sum_j alpha_ij W_V [h_j ; w_ij] (heads concatenated)
    w = G.relative_log(g, ei)
    v = layer.lin_value(torch.cat([h[ei[0]], w], -1)).view(-1, 2, 3) * alpha[..., None]
    ref_out = torch.zeros(4, 2, 3, dtype=D).index_add_(0, ei[1], v).view(4, 6)
    assert torch.allclose(out, ref_out, atol=1e-12)


def test_layer_repr_reset_sequential_and_errors():
    from torch_geometric.nn import Sequential
    G = SE2()
    layer = LieAlgebraAttention(8, 4, "SE2", heads=2, score="mlp")
    assert repr(layer) == "LieAlgebraAttention(8, 4, heads=2, group=SE2, score=mlp)"
    w1 = layer.kernel_w1.detach().clone()
    layer.reset_parameters()
    assert not torch.equal(w1, layer.kernel_w1)
    seq = Sequential("h, edge_index, g", [
        (LieAlgebraAttention(8, 8, G, heads=2), "h, edge_index, g -> h"),
        (torch.nn.ReLU(), "h -> h"),
        (LieAlgebraAttention(8, 8, G, heads=1), "h, edge_index, g -> h"),
    ])
    g = G.random(5)
    ei = complete_graph(torch.zeros(5, dtype=torch.long))
    assert seq(torch.randn(5, 8), ei, g).shape == (5, 8)
    with pytest.raises(ValueError, match="score"):
        LieAlgebraAttention(8, 4, G, score="dot")
    with pytest.raises(ValueError, match="chart"):
        LieAlgebraAttention(8, 4, G, chart="clamp")
    with pytest.raises(ValueError, match="x must have shape"):
        layer(torch.randn(5, 7), ei, g)
    with pytest.raises(ValueError, match="x is torch.float64 but the model's parameters are torch.float32"):
        layer(torch.randn(5, 8, dtype=torch.float64), ei, g)
    with pytest.raises(ValueError, match="x must be a floating-point tensor"):
        layer(torch.ones(5, 8, dtype=torch.long), ei, g)
    with pytest.raises(ValueError, match=r"edge_index holds node index 5, outside \[0, 5\)"):
        layer(torch.randn(5, 8), torch.tensor([[0, 5], [1, 1]]), g)
    with pytest.raises(ValueError, match="edge_index holds node index -1"):
        layer(torch.randn(5, 8), torch.tensor([[0, -1], [1, 1]]), g)
    with pytest.raises(ValueError, match="rel_log must have shape"):
        layer(torch.randn(5, 8), ei, g, rel_log=torch.zeros(3, 3))
    with pytest.raises(ValueError, match="edge_index must hold integer node indices"):
        layer(torch.randn(5, 8), ei.float(), g)
    with pytest.raises(ValueError, match=r"g must hold one .* element per node, shape \(5, "):
        layer(torch.randn(5, 8), ei, g[:4])
    with pytest.raises(ValueError, match="batch must be sorted"):
        complete_graph(torch.tensor([0, 1, 0]))
    with pytest.raises(ValueError, match="batch must hold graph ids >= 0"):
        complete_graph(torch.tensor([-1, 0, 0]))
    with pytest.raises(ValueError, match="batch must hold integer graph ids"):
        complete_graph(torch.tensor([0.0, 0.0, 1.0]))


def test_out_channels_is_the_output_width():
    G = SE2()
    g = G.random(5, dtype=D)
    ei = complete_graph(torch.zeros(5, dtype=torch.long))
    h = torch.randn(5, 4, dtype=D)
    torch.manual_seed(0)
    cat = LieAlgebraAttention(4, 6, G, heads=3).to(D)
    assert cat.head_dim == 2 and cat(h, ei, g).shape == (5, 6)
    torch.manual_seed(0)
    avg = LieAlgebraAttention(4, 6, G, heads=3, concat=False).to(D)
    assert avg.head_dim == 6 and repr(avg).endswith("concat=False)")
    out, (_, alpha) = avg(h, ei, g, return_attention_weights=True)
    assert out.shape == (5, 6)
    # concat=False: the mean of the heads, each of width out_channels
    w = G.relative_log(g, ei)
    v = avg.lin_value(torch.cat([h[ei[0]], w], -1)).view(-1, 3, 6) * alpha[..., None]
    ref = torch.zeros(5, 3, 6, dtype=D).index_add_(0, ei[1], v).mean(1)
    assert torch.allclose(out, ref, atol=1e-12)
    with pytest.raises(ValueError, match=r"out_channels \(6\) must be divisible by heads \(4\)"):
        LieAlgebraAttention(4, 6, G, heads=4)
    assert LieAlgebraAttention(4, 6, G, heads=4, concat=False)(h.float(), ei, g.float()).shape == (5, 6)
    with pytest.raises(ValueError, match="concat"):
        LieAlgebraAttention(4, 6, G, heads=3, concat="yes")


def test_vector_token_attention_out_channels_and_checks():
    from pyg_lie.nn import VectorTokenAttention

    layer = VectorTokenAttention(4, 6, heads=3)
    ei = complete_graph(torch.zeros(5, dtype=torch.long))
    out, (ei_out, alpha) = layer(torch.randn(5, 4), ei, return_attention_weights=True)
    assert out.shape == (5, 6) and alpha.shape == (25, 3) and ei_out is ei
    with pytest.raises(ValueError, match="divisible by heads"):
        VectorTokenAttention(4, 6, heads=4)
    with pytest.raises(ValueError, match="x must have shape"):
        layer(torch.randn(5, 3), ei)
    with pytest.raises(ValueError, match="float64 but the model's parameters are torch.float32"):
        layer(torch.randn(5, 4, dtype=D), ei)
    with pytest.raises(ValueError, match="edge_index holds node index 7"):
        layer(torch.randn(5, 4), torch.tensor([[0, 7], [1, 2]]))


def test_isolated_node_gets_zero_not_nan():
    G = SE2()
    layer = LieAlgebraAttention(4, 4, G)
    ei = torch.tensor([[0, 1], [1, 0]])  # node 2 has no incoming edge
    out = layer(torch.randn(3, 4), ei, G.random(3))
    assert torch.isfinite(out).all() and out[2].abs().max() == 0


def test_layer_compiles_without_graph_breaks():
    G = SE2()
    layer = LieAlgebraAttention(8, 4, G, heads=2)
    g, h = G.random(6), torch.randn(6, 8)
    ei = complete_graph(torch.zeros(6, dtype=torch.long))
    torch._dynamo.reset()
    compiled = torch.compile(layer, backend="eager", fullgraph=True)  # raises on a graph break
    assert torch.allclose(compiled(h, ei, g), layer(h, ei, g), atol=1e-6)


@pytest.mark.parametrize("head", ["midpoint", "token"])
def test_model_compiles_without_graph_breaks(head):
    """With edge_index, batch and num_graphs given, the whole model is one graph."""
    ds = LieSequenceCompletion("SO3", 3, seed=0).batch_all()
    model = LieAlgebraTransformer("SO3", hidden_channels=8, num_layers=2, heads=2, head=head).eval()
    ei = complete_graph(ds.batch)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="eager", fullgraph=True)  # raises on a graph break
    ref = model(ds.g, ei, ds.batch)
    got = compiled(ds.g, ei, ds.batch, num_graphs=3)
    assert torch.allclose(got.prediction, ref.prediction, atol=1e-6)


# -------------------------------------------------------------------- gradients
@pytest.mark.parametrize("name,score", [("SE2", "closed_form"), ("SE2", "mlp"), ("SO3", "closed_form"),
                                        ("Aff2", "closed_form")])
def test_gradcheck_score_wrt_g(name, score):
    G = _group(name)
    layer = LieAlgebraAttention(4, 2, G, heads=2, score=score).to(D)
    ei = complete_graph(torch.zeros(3, dtype=torch.long))
    g = LieSequenceCompletion(G, 1, seed=4)[0].g[:3].clone().requires_grad_(True)  # in the chart

    def f(g):
        return layer.compute_score(G.relative_log(g, ei))

    assert torch.autograd.gradcheck(f, (g,), eps=1e-6, atol=1e-6)
    # and through the whole layer (value path too), including w_ii = 0 (identity)
    h = torch.randn(3, 4, dtype=D)
    assert torch.autograd.gradcheck(lambda g: layer(h, ei, g), (g,), eps=1e-6, atol=1e-6)


# ------------------------------------------------------------------------ chart
class _ToyChartSE2(SE2):
    """SE(2) with an artificial chart boundary at |rotation angle| > 2 (test double)."""

    has_chart_boundary = True

    def in_chart(self, g):
        return self.log(g)[..., 2].abs() / math.sqrt(2.0) < 2.0


def test_out_of_chart_edges_masked_with_warning_or_error():
    G = _ToyChartSE2()
    from pyg_lie.groups.base import rot2, homogeneous
    theta = torch.tensor([0.0, 0.5, 3.0])  # node 2 is out of chart w.r.t. 0 (and 1)
    g = homogeneous(rot2(theta), torch.zeros(3, 2)).to(D)
    ei = complete_graph(torch.zeros(3, dtype=torch.long))
    layer = LieAlgebraAttention(4, 2, G).to(D)
    h = torch.randn(3, 4, dtype=D)
    with pytest.warns(RuntimeWarning, match="outside the principal log chart"):
        out, (_, alpha) = layer(h, ei, g, return_attention_weights=True)
    assert torch.isfinite(out).all()
    bad = ((ei[0] == 2) & (ei[1] != 2)) | ((ei[1] == 2) & (ei[0] != 2))
    assert (alpha[bad] == 0).all() and (alpha[~bad] > 0).all()
    # node 2 only attends to itself
    assert torch.allclose(alpha[(ei[1] == 2) & (ei[0] == 2)], torch.ones(1, dtype=D))
    with pytest.raises(ValueError, match="outside the principal log chart"):
        LieAlgebraAttention(4, 2, G, chart="error").to(D)(h, ei, g)


def test_aff2_out_of_chart_relative_pose():
    G = _group("Aff2")
    from pyg_lie.groups.base import homogeneous
    A = torch.stack([torch.eye(2), torch.diag(torch.tensor([-1.0, -2.0]))]).to(D)  # det > 0, no real log
    g = homogeneous(A, torch.zeros(2, 2, dtype=D))
    ei = complete_graph(torch.zeros(2, dtype=torch.long))
    h = torch.randn(2, 4, dtype=D)
    with pytest.warns(RuntimeWarning):
        out = LieAlgebraAttention(4, 2, G).to(D)(h, ei, g)
    assert torch.isfinite(out).all()
    with pytest.raises(ValueError):
        LieAlgebraAttention(4, 2, G, chart="error").to(D)(h, ei, g)


# --------------------------------------------------------------------- batching
def test_batching_sequences_of_different_lengths():
    G = SE2()
    ds = LieSequenceCompletion(G, 4, length=(4, 9), seed=2)
    assert len({d.num_nodes for d in ds}) > 1
    model = _randomise_heads(LieAlgebraTransformer(G, score="mlp").to(D)).eval()
    from torch_geometric.loader import DataLoader
    data = next(iter(DataLoader(ds, batch_size=4)))
    assert data.num_graphs == 4 and data.g.shape[0] == sum(d.num_nodes for d in ds)
    out = model(data.g, batch=data.batch)
    for b, d in enumerate(ds):
        single = model(d.g)
        assert torch.allclose(single.prediction[0], out.prediction[b], atol=1e-12)
        assert torch.allclose(single.g, out.g[data.batch == b], atol=1e-12)


def test_knn_and_radius_graphs_in_log_metric():
    G = SE2()
    g, batch, _ = _sequences(G, n=2, length=8)
    ei = log_knn_graph(G, g, 3, batch)
    assert ei.shape[1] == g.shape[0] * 4
    assert (batch[ei[0]] == batch[ei[1]]).all()
    gr = G.random(g.shape[0], dtype=D, generator=torch.Generator().manual_seed(5))  # no distance ties
    a = G.random(1, dtype=D)
    ei_r, ei_a = log_knn_graph(G, gr, 3, batch), log_knn_graph(G, G.compose(a, gr), 3, batch)
    key = lambda e: set(map(tuple, e.t().tolist()))  # noqa: E731
    assert key(ei_r) == key(ei_a)  # invariant under the left action
    # the nearest neighbour of an interior token is one step away
    d = relative_log(G, g, ei)[0].norm(dim=-1)
    full = relative_log(G, g, complete_graph(batch))[0].norm(dim=-1)
    assert d.max() <= full.max() + 1e-12
    er = log_radius_graph(G, g, r=1e-9, batch=batch)
    assert (er[0] == er[1]).all() and er.shape[1] == g.shape[0]
    model = LieAlgebraTransformer(G, k=3).to(D)
    assert model(g, batch=batch).prediction.shape == (2, 3, 3)


# ---------------------------------------------------------------------- data set
@pytest.mark.parametrize("name", ALL_GROUPS)
def test_dataset_relative_poses_in_chart_and_deterministic(name):
    G = _group(name)
    ds = LieSequenceCompletion(G, 3, seed=7)
    ds2 = LieSequenceCompletion(G, 3, seed=7)
    for d, d2 in zip(ds, ds2):
        assert torch.equal(d.g, d2.g) and torch.equal(d.target, d2.target)
        assert d.g.shape == (7, G.matrix_size, G.matrix_size) and 1 <= int(d.missing) <= 6
        assert int(d.missing) not in d.order.tolist()
        # log(g_a^-1 g_b) == (k_b - k_a) xi for every pair: all relative poses are in the chart
        k = torch.cat([d.order, d.missing]).to(D)
        allg = torch.cat([d.g, d.target])
        ei = complete_graph(torch.zeros(8, dtype=torch.long))
        w, valid = relative_log(G, allg, ei)
        assert valid is None or valid.all()
        expect = (k[ei[0]] - k[ei[1]])[:, None] * d.xi
        assert (w - expect).abs().max() < 1e-8 * max(1.0, float(expect.abs().max()))
    assert not torch.equal(LieSequenceCompletion(G, 1, seed=8)[0].g, ds[0].g)


def test_dataset_bad_arguments():
    for kwargs, message in [(dict(num_sequences=0), "num_sequences"), (dict(length=2), "length"),
                            (dict(margin=1.0), "margin"),
                            (dict(step_std={"rotation": -0.1}), r"step_std\['rotation'\] must be a finite number >= 0"),
                            (dict(step_std={"translation": float("nan")}), "step_std"),
                            (dict(dtype=torch.int64), "dtype must be a floating-point dtype")]:
        with pytest.raises(ValueError, match=message):
            LieSequenceCompletion(**{"group": "SE2", "num_sequences": 2, **kwargs})


# ------------------------------------------------------------------- training
def test_short_training_run_reduces_loss():
    G = SE2()
    torch.manual_seed(0)
    data = LieSequenceCompletion(G, 64, seed=0, dtype=torch.float32).batch_all()
    model = LieAlgebraTransformer(G, hidden_channels=16, num_layers=2, heads=2)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    losses = []
    for _ in range(40):
        out = model(data.g, batch=data.batch)
        loss = completion_loss(G, out, data.g, data.target, data.batch)
        opt.zero_grad(); loss.backward(); opt.step()
        losses.append(float(loss.detach()))
    assert all(math.isfinite(v) for v in losses)
    assert sum(losses[-5:]) / 5 < 0.6 * losses[0]


def test_rotation_by_exactly_pi_gives_finite_symmetric_scores():
    G = _group("SO3")
    Rz = torch.diag(torch.tensor([-1.0, -1.0, 1.0], dtype=D))  # rotation by pi about z
    g = torch.stack([torch.eye(3, dtype=D), Rz])
    ei = torch.tensor([[1, 0], [0, 1]])
    layer = LieAlgebraAttention(4, 2, G, heads=2).to(D)
    s = layer.compute_score(relative_log(G, g, ei)[0])
    assert torch.isfinite(s).all()
    # ||log|| = sqrt(2) pi for both directions whatever axis sign the convention picks
    assert torch.allclose(s[0], s[1]) and torch.allclose(s[0], -2 * math.pi ** 2 * torch.ones(2, dtype=D))
    assert torch.isfinite(layer(torch.randn(2, 4, dtype=D), ei, g)).all()


def test_invariant_node_feature_payload_keeps_equivariance():
    G = SE2()
    model = _randomise_heads(LieAlgebraTransformer(G, in_channels=3).to(D)).eval()
    g, batch, _ = _sequences(G, n=2)
    x = torch.randn(g.shape[0], 3, dtype=D)
    a = G.random(2, dtype=D)
    p = model(g, batch=batch, x=x).prediction
    pa = model(G.compose(a[batch], g), batch=batch, x=x).prediction
    assert pose_error(G, pa, G.compose(a, p)).max() < 1e-12
    assert (model(g, batch=batch, x=torch.randn_like(x)).prediction - p).abs().max() > 1e-6  # x is used
    with pytest.raises(ValueError, match="in_channels"):
        model(g, batch=batch)


def test_split_module_keeps_every_name_importable():
    """The graphs, the vector-token layer and the losses moved out of
    models/lie_algebra_transformer.py; every public name is still importable from there (and the
    models and losses from pyg_lie.models), as the same object."""
    import pyg_lie.models as models
    import pyg_lie.models.lie_algebra_losses as losses
    import pyg_lie.models.lie_algebra_transformer as old
    import pyg_lie.neighbors as nb
    from pyg_lie.nn import VectorTokenAttention

    for name in old.__all__:
        assert getattr(old, name) is not None
    for name in ("complete_graph", "log_knn_graph", "log_radius_graph", "GRAPH_METHODS"):
        assert getattr(old, name) is getattr(nb, name)
    for name in ("pose_error", "completion_loss", "equivariance_error"):
        assert getattr(old, name) is getattr(losses, name) is getattr(models, name)
    assert old.VectorTokenAttention is VectorTokenAttention
    assert models.LieAlgebraOutput is old.LieAlgebraOutput and models.build_model is old.build_model


@pytest.mark.parametrize("group", ["SE2", "SO3", "Aff2"])
def test_engine_path_equals_message_passing(group):
    """The default path (target-sorted edges, one sparse product plus the algebra-side value
    term) against PyG message passing, which the layer takes while an explainer's mask is set
    (an all-ones mask is a zero log-bias): values, attention weights in the given edge order,
    and gradients, in float64 with unsorted edges, repeated edges and an edge-feature term."""
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

    torch.manual_seed(0)
    G = get_group(group)
    N, E = 15, 70
    ei = torch.randint(0, N, (2, E))
    ei[:, :2] = torch.tensor([[3, 3], [4, 4]])  # a repeated edge
    g = G.random(N, dtype=torch.float64)
    x = torch.randn(N, 6, dtype=torch.float64, requires_grad=True)
    ea = torch.randn(E, 3, dtype=torch.float64)
    layer = LieAlgebraAttention(6, 8, group, heads=2, edge_dim=3).double()
    out, (_, alpha) = layer(x, ei, g, edge_attr=ea, return_attention_weights=True)
    (gx,) = torch.autograd.grad(out.square().sum(), x)
    set_masks(layer, torch.ones(E, dtype=torch.float64), ei, apply_sigmoid=False)
    try:
        ref, (_, ref_alpha) = layer(x, ei, g, edge_attr=ea, return_attention_weights=True)
        (ref_gx,) = torch.autograd.grad(ref.square().sum(), x)
    finally:
        clear_masks(layer)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(alpha, ref_alpha, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(gx, ref_gx, atol=1e-11, rtol=1e-9)
