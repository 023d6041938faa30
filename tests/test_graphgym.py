"""GraphGym: every attention layer registered with its settings in ``cfg.pyg_lie``, a model
built from a config and trained a few steps; the transform that lifts ``pos`` to ``g``."""
import math
import warnings

import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Batch, Data

pytest.importorskip("yacs")
pytest.importorskip("pytorch_lightning")

import pyg_lie  # noqa: E402
from pyg_lie import neighbors  # noqa: E402
from pyg_lie.graphgym import CONFIG_DEFAULTS, LAYER_NAMES, lift_transform  # noqa: E402
from pyg_lie.transforms import LiftPositions  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torch_geometric.graphgym import register
    from torch_geometric.graphgym.config import cfg, set_cfg
    from torch_geometric.graphgym.loss import compute_loss
    from torch_geometric.graphgym.model_builder import create_model


@pytest.fixture
def gg_cfg():
    pyg_lie.register_graphgym()
    set_cfg(cfg)  # GraphGym's defaults, with the pyg_lie section from the registered hook
    yield cfg
    set_cfg(cfg)


def test_registration_is_idempotent_and_adds_config_keys():
    a, b = pyg_lie.register_graphgym(), pyg_lie.register_graphgym()  # no KeyError the second time
    assert a == b and set(LAYER_NAMES) | {"group_mean"} <= set(a)
    assert all(register.layer_dict[n] is a[n] for n in LAYER_NAMES)
    assert "pyg_lie" in register.config_dict
    with pytest.raises(KeyError):  # GraphGym's own guard, which register_graphgym respects
        register.register_config("pyg_lie", lambda c: None)
    set_cfg(cfg)
    assert dict(cfg.pyg_lie) == CONFIG_DEFAULTS
    assert not hasattr(pyg_lie.graphgym, "GRAPHGYM_GROUP")  # the group is a config key


def _planar(num_graphs=12, n=10, seed=0):
    """Label 1: points spread along a random direction (elongated), 0: isotropic."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(num_graphs):
        label = i % 2
        pos = torch.randn(n, 2, generator=g) * (torch.tensor([2.0, 0.3]) if label else 1.0)
        th = float(torch.rand(1, generator=g)) * 2 * math.pi
        rot = torch.tensor([[math.cos(th), -math.sin(th)], [math.sin(th), math.cos(th)]])
        out.append(Data(x=torch.randn(n, 2, generator=g), pos=pos @ rot.T + torch.randn(2, generator=g),
                        y=torch.tensor([label])))
    return out


def _sphere(num_graphs=12, n=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(num_graphs):
        pos = torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=-1)
        edge_index = neighbors.geodesic_radius_graph(pos, 1.2, loop=True)
        x = torch.randn(n, 2, generator=g)
        out.append(Data(x=x, pos=pos, edge_index=edge_index, quad_weights=torch.full((n,), 4 * math.pi / n),
                        y=torch.tensor([int(x[:, 0].mean() > 0)])))
    return out


CASES = {
    "lie_self_attention": dict(group="SE2", lift_samples=2, lift="finite", pooling="group_mean"),
    "lie_transformer_block": dict(group="SE2", lift_samples=1, pooling="mean"),
    "lie_algebra_attention": dict(group="SE2", lift_samples=1, pooling="mean"),
    "s2_attention_conv": dict(pooling="mean"),
    "equivariant_self_attention": dict(finite_group="C4", heads=1, pooling="mean"),
}


def _train(model, batch, steps):
    """``steps`` Adam steps (lr 2e-2) on GraphGym's loss; the loss of every step."""
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    losses = []
    for _ in range(steps):
        pred, true = model(batch.clone())
        loss, _ = compute_loss(pred, true)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("layer", list(CASES))
def test_build_and_train_from_config(gg_cfg, layer):
    case = dict(CASES[layer])
    torch.manual_seed(0)
    gg_cfg.accelerator = "cpu"
    gg_cfg.dataset.task = "graph"
    gg_cfg.dataset.task_type = "classification"
    gg_cfg.model.loss_fun = "cross_entropy"
    gg_cfg.model.graph_pooling = case.pop("pooling")
    gg_cfg.gnn.head = "graph"
    gg_cfg.gnn.layer_type = layer
    gg_cfg.gnn.layers_pre_mp, gg_cfg.gnn.layers_mp, gg_cfg.gnn.layers_post_mp = 1, 2, 1
    gg_cfg.gnn.dim_inner = 16
    gg_cfg.gnn.batchnorm = False
    gg_cfg.gnn.l2norm = False
    gg_cfg.pyg_lie.heads = 2
    gg_cfg.pyg_lie.lift_seed = 0
    gg_cfg.pyg_lie.radius = 0.0 if layer == "s2_attention_conv" else 2.5
    for k, v in case.items():
        gg_cfg.pyg_lie[k] = v
    if layer == "s2_attention_conv":
        graphs = _sphere()
    else:
        transform = lift_transform()
        graphs = [transform(d) for d in _planar()]
        assert all(d.g.shape == (d.num_nodes, 3, 3) for d in graphs)
    batch = Batch.from_data_list(graphs)
    model = create_model(to_device=False, dim_in=2, dim_out=2)
    kinds = {type(m).__name__ for m in model.modules()}
    assert any(layer.replace("_", "") in k.lower() for k in kinds), kinds
    losses = _train(model, batch, 20)
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.9 * losses[0], losses


@pytest.mark.parametrize("layer", ["lie_self_attention", "lie_transformer_block", "lie_algebra_attention"])
def test_build_and_train_with_edge_attr(gg_cfg, layer):
    """cfg.pyg_lie.use_edge_attr: the layers take batch.edge_attr (distances, copied to the lift
    pairs by the lift) as a score term of width cfg.dataset.edge_dim."""
    torch.manual_seed(0)
    gg_cfg.accelerator = "cpu"
    gg_cfg.dataset.task, gg_cfg.dataset.task_type = "graph", "classification"
    gg_cfg.dataset.edge_dim = 1
    gg_cfg.model.loss_fun, gg_cfg.model.graph_pooling, gg_cfg.gnn.head = "cross_entropy", "mean", "graph"
    gg_cfg.gnn.layer_type = layer
    gg_cfg.gnn.layers_pre_mp, gg_cfg.gnn.layers_mp, gg_cfg.gnn.layers_post_mp = 1, 2, 1
    gg_cfg.gnn.dim_inner, gg_cfg.gnn.batchnorm, gg_cfg.gnn.l2norm = 16, False, False
    gg_cfg.pyg_lie.heads, gg_cfg.pyg_lie.lift_seed = 2, 0
    gg_cfg.pyg_lie.use_edge_attr = True
    tf = T.Compose([T.RadiusGraph(2.5, max_num_neighbors=64), T.Distance(norm=False),
                    LiftPositions("SE2", 2, mode="finite")])
    batch = Batch.from_data_list([tf(d) for d in _planar()])
    assert batch.edge_attr.shape == (batch.num_edges, 1)
    model = create_model(to_device=False, dim_in=2, dim_out=2)
    attn = [m for m in model.modules() if hasattr(m, "lin_edge")]
    assert attn and all(m.lin_edge is not None and m.edge_dim == 1 for m in attn)
    losses = _train(model, batch, 15)
    assert all(math.isfinite(v) for v in losses) and losses[-1] < 0.9 * losses[0], losses
    assert all(m.lin_edge.weight.grad is not None and m.lin_edge.weight.grad.abs().sum() > 0 for m in attn)
    b = batch.clone()
    del b.edge_attr
    with pytest.raises(ValueError, match="use_edge_attr is set but the batch has no edge_attr"):
        model(b)
    gg_cfg.dataset.edge_dim = 0
    with pytest.raises(ValueError, match="cfg.dataset.edge_dim"):
        create_model(to_device=False, dim_in=2, dim_out=2)


def test_missing_g_is_named(gg_cfg):
    from torch_geometric.graphgym.models.layer import LayerConfig
    layer = register.layer_dict["lie_self_attention"](LayerConfig(dim_in=4, dim_out=4))
    with pytest.raises(ValueError, match="batch.g.*LiftPositions"):
        layer(Data(x=torch.randn(3, 4), edge_index=torch.tensor([[0, 1], [1, 2]])))
    gg_cfg.pyg_lie.heads = 3
    with pytest.raises(ValueError, match=r"cfg.pyg_lie.heads \(3\) must be >= 1 and divide"):
        register.layer_dict["lie_algebra_attention"](LayerConfig(dim_in=4, dim_out=4))


# ----------------------------------------------------------------- the transform
def _graph(n=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    d = Data(x=torch.randn(n, 3, generator=g), pos=torch.randn(n, 2, generator=g), y=torch.tensor([1]),
             node_y=torch.arange(n))
    d = T.RadiusGraph(1.5, max_num_neighbors=100)(d)
    d.edge_attr = torch.arange(d.num_edges, dtype=torch.float)[:, None].repeat(1, 2)
    return d


def test_lift_positions_one_lift_keeps_the_graph():
    d = _graph()
    out = LiftPositions("T2")(d.clone())
    assert torch.equal(out.edge_index, d.edge_index) and torch.equal(out.x, d.x)
    assert torch.allclose(out.g[:, :2, 2], d.pos) and torch.equal(out.g[:, :2, :2], torch.eye(2).expand(7, 2, 2))


@pytest.mark.parametrize("mode", ["haar", "finite"])
def test_lift_positions_lifts_nodes_edges_and_attributes(mode):
    from pyg_lie.groups import SE2
    from pyg_lie.nn.lifted_edges import expand_edges
    d, K = _graph(), 3
    out = LiftPositions("SE2", K, mode=mode, seed=4)(d.clone())
    n = d.num_nodes
    assert out.num_nodes == n * K and out.g.shape == (n * K, 3, 3)
    assert torch.equal(out.lift_index, torch.arange(n).repeat_interleave(K))
    assert torch.allclose(out.g[:, :2, 2], d.pos.repeat_interleave(K, 0), atol=1e-6)  # g_i . o = pos_i
    assert SE2().is_element(out.g).all() if hasattr(SE2(), "is_element") else True
    rot = out.g[:, :2, :2]
    assert torch.allclose(rot @ rot.transpose(1, 2), torch.eye(2).expand_as(rot), atol=1e-5)
    assert torch.equal(out.x, d.x.repeat_interleave(K, 0)) and torch.equal(out.node_y, d.node_y.repeat_interleave(K))
    assert torch.equal(out.y, d.y)  # graph-level target untouched
    assert torch.equal(out.edge_index, expand_edges(d.edge_index, n, K))  # the LieTransformer's layout
    e = out.edge_attr[:, 0].long()  # each lifted edge carries its base edge's attributes
    assert torch.equal(d.edge_index[0, e], out.edge_index[0] // K)
    assert torch.equal(d.edge_index[1, e], out.edge_index[1] // K)
    again = LiftPositions("SE2", K, mode=mode, seed=4)(d.clone())
    assert torch.equal(again.g, out.g)
    if mode == "haar":
        assert not torch.equal(LiftPositions("SE2", K)(d.clone()).g, LiftPositions("SE2", K)(d.clone()).g)


def test_lift_positions_in_a_loader_and_errors():
    from torch_geometric.loader import DataLoader
    tf = T.Compose([T.RadiusGraph(1.5), LiftPositions("SE2", 2, mode="finite")])
    batch = next(iter(DataLoader([tf(Data(pos=torch.randn(n, 2))) for n in (5, 8)], batch_size=2)))
    assert batch.g.shape == (26, 3, 3) and batch.batch.tolist() == [0] * 10 + [1] * 16
    assert int(batch.edge_index.max()) < 26
    # on an already collated batch: graph ids and offsets follow the lifted nodes
    b = LiftPositions("SE2", 2, mode="finite")(Batch.from_data_list([Data(pos=torch.randn(n, 2)) for n in (3, 5)]))
    assert b.ptr.tolist() == [0, 6, 16] and b.batch.tolist() == [0] * 6 + [1] * 10 and b.g.shape == (16, 3, 3)
    with pytest.raises(ValueError, match="data.pos"):
        LiftPositions("SE2")(Data(x=torch.randn(3, 2)))
    with pytest.raises(ValueError, match="lift_samples"):
        LiftPositions("SE2", 0)
    with pytest.raises(ValueError):
        LiftPositions("SE2")(Data(pos=torch.randn(4, 3)))  # SE(2) acts on the plane


def test_graphgym_model_with_finite_lift_is_invariant(gg_cfg):
    """SE(2) with the C4 lift: a GraphGym model's prediction is unchanged when the cloud is rotated
    by 90 degrees and translated (float64; batch norm in evaluation mode)."""
    torch.manual_seed(1)
    gg_cfg.accelerator = "cpu"
    gg_cfg.dataset.task, gg_cfg.dataset.task_type, gg_cfg.gnn.head = "graph", "regression", "graph"
    gg_cfg.model.loss_fun = "mse"
    gg_cfg.gnn.layer_type, gg_cfg.gnn.layers_pre_mp, gg_cfg.gnn.layers_mp = "lie_self_attention", 1, 2
    gg_cfg.gnn.dim_inner, gg_cfg.model.graph_pooling = 16, "group_mean"
    gg_cfg.pyg_lie.heads, gg_cfg.pyg_lie.lift_samples, gg_cfg.pyg_lie.lift = 2, 4, "finite"
    gg_cfg.pyg_lie.radius = 1.5
    model = create_model(to_device=False, dim_in=3, dim_out=1).double().eval()
    g = torch.Generator().manual_seed(0)
    x, pos = torch.randn(12, 3, generator=g, dtype=torch.float64), torch.randn(12, 2, generator=g, dtype=torch.float64)
    moved = torch.stack([-pos[:, 1], pos[:, 0]], 1) + torch.tensor([0.75, -0.5], dtype=torch.float64)
    tf = lift_transform()
    a, b = (Batch.from_data_list([tf(Data(x=x, pos=p, y=torch.zeros(1, 1, dtype=torch.float64)))]) for p in (pos, moved))
    assert a.num_edges == b.num_edges > 12 * 16  # the same (non-trivial) radius graph
    ya, yb = model(a)[0], model(b)[0]
    assert torch.allclose(ya, yb, atol=1e-10), (ya, yb)
    # not blind: another cloud changes the prediction
    other = Batch.from_data_list([tf(Data(x=x, pos=pos * 1.3, y=torch.zeros(1, 1, dtype=torch.float64)))])
    assert not torch.allclose(model(other)[0], ya, atol=1e-4)
