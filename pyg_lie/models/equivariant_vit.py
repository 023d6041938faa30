"""Vision transformer equivariant to a discrete subgroup ``G`` of O(2).

The paper's Eq. (3) with a class token (Section 4.5)::

    images --(resample)--> C(H_0, R^c) --patch embed + PosEnc--> C(H, V)
           --(+ cls in the trivial irrep)--> Block_1 ... Block_depth
           --cls token--> invariantization (Eq. 15) --> linear head --> logits

Every map is ``G``-equivariant, so the logits are ``G``-invariant: on square grids under
90-degree rotations and flips of the image, on hexagonal grids under the induced
permutations of the hexagonal pixels.

With ``in_type`` (an escnn ``FieldType``) the model reads escnn ``GeometricTensor`` fields
(for example the output of an ``R2Conv`` stem) instead of images, and
``features(..., as_geometric_tensor=True)`` hands the patch tokens back to escnn.
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional, Union

import numpy as np
import torch
from torch import Tensor, nn

from .. import _checks as checks
from ..groups.finite import FiniteO2Group, o2_group
from ..groups.finite_reps import GSet
from ..interop.escnn import check_gspace, escnn_gspace, spatial_change_of_basis, to_escnn_type
from ..nn._deprecation import renamed
from ..ops import CSRStructure
from ..vit.attention import EquivariantSelfAttention, complete_graph, radius_patch_graph
from ..vit.field_type import FieldType, restriction_matrix
from ..vit.linear import EquivariantLinear, EquivariantRMSNorm
from ..vit.nonlinearity import FourierNonlinearity, gset_family, gset_from_spec, synthesis_matrix
from ..vit.patch_embed import EquivariantPatchEmbed, make_grid
from ..vit.positional import InvariantPositionalEncoding

__all__ = ["EquivariantViT", "EquivariantViTBlock", "SQUARE_GROUPS", "HEX_GROUPS"]

SQUARE_GROUPS = ("C1", "C2", "C4", "D1", "D2", "D4")
HEX_GROUPS = ("C1", "C2", "C3", "C6", "D1", "D2", "D3", "D6")


def drop_path_rate(name: str, value) -> float:
    """``value`` as a float in ``[0, 1]`` (1: the residual branches are always dropped)."""
    v = checks._float(value)
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return v


class EquivariantViTBlock(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))`` with
    ``mlp = Linear(V -> C(X)) o FourierNonlinearity o Linear(C(X) -> V)``.

    ``explain_mode`` is the attention's (:class:`~pyg_lie.vit.EquivariantSelfAttention`).

    Shapes: ``x (N, V.dim)``, ``edge_index (2, E)`` -> ``(N, V.dim)``; with
    ``return_attention_weights=True`` the pair ``(out, (edge_index, alpha (E, heads)))`` of the
    block's attention, PyG's convention.

    Example:
        >>> import torch
        >>> from pyg_lie.groups.finite import o2_group
        >>> from pyg_lie.models.equivariant_vit import EquivariantViTBlock
        >>> from pyg_lie.vit import FieldType
        >>> from pyg_lie.vit.attention import complete_graph
        >>> from pyg_lie.vit.nonlinearity import gset_family
        >>> _ = torch.manual_seed(0)
        >>> V = FieldType.regular("C4", 1)
        >>> block = EquivariantViTBlock(V, gset_family(o2_group("C4"), "regular", 1), heads=1, attention="coupled")
        >>> out, (ei, alpha) = block(torch.randn(5, V.dim), complete_graph(1, 5), return_attention_weights=True)
        >>> out.shape, alpha.shape
        (torch.Size([5, 4]), torch.Size([25, 1]))
    """

    def __init__(self, V: FieldType, gset: GSet, heads: int, attention: str,
                 irrep_heads: Optional[Mapping[str, int]] = None, head_ids=None, attn_dropout: float = 0.0,
                 drop_path: float = 0.0, activation: Optional[Callable] = None, *, explain_mode: str = "score"):
        super().__init__()
        self.norm1 = EquivariantRMSNorm(V)
        self.attn = EquivariantSelfAttention(V, heads, attention, irrep_heads, head_ids, dropout=attn_dropout,
                                             explain_mode=explain_mode)
        self.norm2 = EquivariantRMSNorm(V)
        self.act = FourierNonlinearity(gset, activation)
        self.mlp_in = EquivariantLinear(V, self.act.field_type)
        self.mlp_out = EquivariantLinear(self.act.field_type, V)
        self.drop_path = drop_path_rate("drop_path", drop_path)

    def _dp(self, y: Tensor, batch: int) -> Tensor:
        """Stochastic depth: the branch of every image dropped with probability ``drop_path``,
        kept ones scaled by ``1 / (1 - drop_path)``; ``drop_path = 1`` drops every branch (no
        ``0 / 0``)."""
        if not self.training or self.drop_path == 0.0:
            return y
        keep = 1.0 - self.drop_path
        if keep <= 0.0:
            return torch.zeros_like(y)
        mask = torch.rand(batch, 1, 1, device=y.device, dtype=y.dtype) < keep
        return (y.view(batch, -1, y.shape[-1]) * mask / keep).view_as(y)

    def forward(self, x: Tensor, edge_index: Tensor, batch: int = 1, csr=None,
                return_attention_weights: Optional[bool] = None):
        """``batch``: the number of images whose tokens ``x`` holds (drop path drops per image);
        ``csr``: the patch graph's structure, passed to the attention."""
        if return_attention_weights:
            h, weights = self.attn(self.norm1(x), edge_index, return_attention_weights=True, csr=csr)
        else:
            h, weights = self.attn(self.norm1(x), edge_index, csr=csr), None
        x = x + self._dp(h, batch)
        out = x + self._dp(self.mlp_out(self.act(self.mlp_in(self.norm2(x)))), batch)
        return (out, weights) if return_attention_weights else out


class EquivariantViT(nn.Module):
    """G-equivariant ViT classifier with invariant logits.

    Args:
        group: ``"D4"``, ``"C4"``, ``"D2"``, ``"C2"``, ``"C1"`` (square) or ``"D6"``,
            ``"C6"``, ``"D3"``, ``"C3"``, ``"C1"`` (hex); also ``D1``, ``D2``, ``C2``.
        grid: ``"square"`` or ``"hex"``.
        img_size: side ``S`` of the square input images.
        patch_size: square: ``P`` (``S % P == 0``); hex: ``N2``, points per patch side.
        in_channels: colour channels ``c`` (default 3; with ``in_type``: ``in_type.size``, and
            a value passed must equal it).
        num_classes: number of logits.
        depth: number of transformer blocks.
        heads: attention heads (per irrep for ``irrepwise``).
        channels: token space ``V`` = ``channels`` copies of the regular representation.
        attention: ``"coupled"`` or ``"irrepwise"``.
        mlp_gset: G-set family of the MLP nonlinearity (``"regular"``,
            ``"regular+trivial"``, ``"quotients"``), a dict ``{subgroup words: copies}``
            or a :class:`GSet`.
        mlp_ratio: ``n / channels``: the family is taken ``round(mlp_ratio * channels)`` times.
        patches_side: hex only, ``N1`` patches per side of the hexagon of patches.
        attn_radius: ``None`` (complete patch graph) or a radius in pixels between patch
            centres (local attention; the class token always sees all patches).
        attn_dropout, drop_path, head_dropout: regularisation (training only).
        irrep_heads: ``{irrep: h_rho}`` for irrep-wise attention.
        field_type: explicit token type ``V`` (overrides ``channels``).
        activation: pointwise nonlinearity (default GELU).
        head_ids: the attention head of every channel, per irrep of the token type ``V``:
            ``[[head of channel c of rho for c in range(C_rho)] for rho in V's irreps]`` (head
            ids ``0 .. h - 1``, every head used). Overrides ``heads``, ``attention`` and
            ``irrep_heads`` in every block; :meth:`restrict` uses it to keep the heads of the
            model it restricts. ``_head_ids`` is its deprecated name.
        in_type: an ``escnn.nn.FieldType`` on the gspace of ``group``
            (``gspaces.rot2dOnR2(N=n)`` for ``C_n``, ``gspaces.flipRot2dOnR2(N=n)`` for ``D_n``;
            square grid, groups ``C1, C2, C4, D4``): the model then takes a
            ``GeometricTensor`` of exactly this type, ``(B, in_type.size, S, S)``, and its
            patch embedding spans ``Hom_G(C(U, W), V)`` for the fields' representation ``W``.

    Shapes:
        ``forward(images)``: ``(B, c, S, S)`` (hex also accepts resampled pixels
        ``(B, c, num_pixels)``; with ``in_type`` a ``GeometricTensor``) -> logits
        ``(B, num_classes)``.

    Raises:
        TypeError: with ``in_type``, an input that is not an escnn ``GeometricTensor``;
            without it, a ``GeometricTensor`` (build the model with ``in_type=gt.type``).
        ValueError: a ``GeometricTensor`` of another type than ``in_type``, an ``in_type``
            whose group is not ``group``, and the image checks below.

    Example:
        >>> import torch
        >>> from pyg_lie.models import EquivariantViT
        >>> _ = torch.manual_seed(0)
        >>> model = EquivariantViT("D4", img_size=8, patch_size=2, num_classes=3, depth=1, heads=1, channels=1).eval()
        >>> images = torch.randn(2, 3, 8, 8)
        >>> logits = model(images)
        >>> logits.shape
        torch.Size([2, 3])
        >>> torch.allclose(model(images.rot90(1, dims=(2, 3))), logits, atol=1e-5)  # invariant
        True
    """

    def __init__(self, group: Union[str, FiniteO2Group] = "D4", grid: str = "square", img_size: int = 32,
                 patch_size: int = 4, in_channels: Optional[int] = None, num_classes: int = 10, depth: int = 6, heads: int = 3,
                 channels: int = 3, attention: str = "coupled", mlp_gset: Union[str, Mapping, GSet] = "regular",
                 mlp_ratio: float = 1.0, patches_side: int = 3, attn_radius: Optional[float] = None,
                 attn_dropout: float = 0.0, drop_path: float = 0.0, head_dropout: float = 0.0,
                 irrep_heads: Optional[Mapping[str, int]] = None, field_type: Optional[FieldType] = None,
                 activation: Optional[Callable] = None, in_type=None, _head_ids=None, _invariant_groups=None,
                 head_ids=None):
        super().__init__()
        head_ids = renamed("EquivariantViT", "_head_ids", "head_ids", _head_ids, head_ids)
        G = o2_group(group)
        if grid not in ("square", "hex", "hexagonal"):
            raise ValueError(f"grid: must be 'square' or 'hex', got {grid!r}")
        allowed = SQUARE_GROUPS if grid == "square" else HEX_GROUPS
        if G.name not in allowed:
            raise ValueError(f"group: {G.name} is not supported on grid={grid!r}; choose one of {allowed}"
                             + (" or use grid='hex'" if grid == "square" and G.name in HEX_GROUPS else "")
                             + (" or use grid='square'" if grid != "square" and G.name in SQUARE_GROUPS else ""))
        img_size = checks.size("img_size", img_size, high=1 << 14)  # the grid tables hold img_size^2 pixels
        patch_size = checks.size("patch_size", patch_size, high=1 << 14)
        if in_channels is not None:
            in_channels = checks.size("in_channels", in_channels)
        num_classes = checks.size("num_classes", num_classes)
        depth = checks.size("depth", depth, low=0, high=1 << 12)
        heads = checks.size("heads", heads)
        channels = checks.size("channels", channels, high=1 << 14)
        mlp_ratio = checks.positive_float("mlp_ratio", mlp_ratio)
        if mlp_ratio * channels > 1 << 14:
            raise ValueError(f"mlp_ratio * channels must be at most {1 << 14} (the MLP's G-set copies), got "
                             f"{mlp_ratio} * {channels}")
        patches_side = checks.size("patches_side", patches_side, high=1 << 10)
        attn_radius = checks.optional_length("attn_radius", attn_radius, "the complete patch graph")
        attn_dropout = checks.probability("attn_dropout", attn_dropout)
        drop_path = drop_path_rate("drop_path", drop_path)
        head_dropout = checks.probability("head_dropout", head_dropout)
        if attention not in ("coupled", "irrepwise"):
            raise ValueError(f"attention must be 'coupled' or 'irrepwise', got {attention!r}")
        self.group = G
        self.in_type = in_type
        pixel_type = None
        if in_type is not None:
            if grid != "square":
                raise ValueError("in_type: escnn fields live on square pixel arrays; use grid='square'")
            if G.name not in ("C1", "C2", "C4", "D4"):
                raise ValueError(f"in_type: escnn fields on square grids need group C1, C2, C4 or D4, got {G.name} "
                                 "(escnn's reflection axis is not one of this dihedral group's)")
            check_gspace(in_type, G)
            if in_channels is not None and in_channels != in_type.size:
                raise ValueError(f"in_channels: must equal in_type.size = {in_type.size} (or be left out), "
                                 f"got {in_channels}")
            in_channels = in_type.size
            pixel_type, M = spatial_change_of_basis(in_type, G)
            self.register_buffer("in_basis", torch.as_tensor(M, dtype=torch.float64), persistent=False)
        elif in_channels is None:
            in_channels = 3
        self.pixel_type = pixel_type
        self.config = dict(group=G.name, grid=grid, img_size=img_size, patch_size=patch_size, in_channels=in_channels,
                           num_classes=num_classes, depth=depth, heads=heads, channels=channels, attention=attention,
                           mlp_gset=mlp_gset, mlp_ratio=mlp_ratio, patches_side=patches_side, attn_radius=attn_radius,
                           attn_dropout=attn_dropout, drop_path=drop_path, head_dropout=head_dropout,
                           irrep_heads=irrep_heads, activation=activation, in_type=in_type)
        self.grid = make_grid(G, grid, img_size, patch_size, patches_side)
        V = field_type if field_type is not None else FieldType.regular(G, channels)
        self.field_type = V
        if isinstance(mlp_gset, GSet):
            gset = mlp_gset
        elif isinstance(mlp_gset, Mapping):
            base = gset_from_spec(G, mlp_gset)
            gset = GSet.disjoint_union([base] * max(1, round(mlp_ratio * channels)))
        else:
            gset = gset_family(G, mlp_gset, max(1, round(mlp_ratio * channels)))
        self.gset = gset
        self.attn_radius = attn_radius
        self.patch_embed = EquivariantPatchEmbed(self.grid, in_channels, V, pixel_type=pixel_type)
        self.pos = InvariantPositionalEncoding(self.grid.patch_perms, V)
        Ct = V.blocks[0][1]
        if Ct == 0:
            raise ValueError("field_type: the class token needs at least one trivial channel")
        self.cls_token = nn.Parameter(torch.zeros(Ct))
        self.blocks = nn.ModuleList([
            EquivariantViTBlock(V, gset, heads, attention, irrep_heads, head_ids, attn_dropout,
                                drop_path * (i + 1) / max(depth, 1), activation) for i in range(depth)])
        self.norm = EquivariantRMSNorm(V)
        # invariantization (Eq. 15): trivial features as values, norms of every other channel
        if _invariant_groups is None:
            values, groups = list(range(Ct)), []
            for r, C, s in V.blocks[1:]:
                for c in range(C):
                    groups.append([s.start + c * r.dim + j for j in range(r.dim)])
            _invariant_groups = (values, groups)
        values, groups = _invariant_groups
        self._invariant_groups = (list(values), [list(g) for g in groups])
        self.register_buffer("inv_values", torch.as_tensor(values, dtype=torch.long), persistent=False)
        self.register_buffer("inv_feat", torch.as_tensor([f for g in groups for f in g], dtype=torch.long), persistent=False)
        self.register_buffer("inv_group", torch.as_tensor([i for i, g in enumerate(groups) for _ in g], dtype=torch.long),
                             persistent=False)
        self.num_invariants = len(values) + len(groups)
        self.head_dropout = nn.Dropout(head_dropout)
        self.head = nn.Linear(self.num_invariants, num_classes)
        self._graphs: dict = {}
        self._csrs: dict = {}
        self._out_type = None
        self.reset_parameters()

    # ------------------------------------------------------------------ utils
    def reset_parameters(self) -> None:
        for m in self.modules():
            if m is not self and hasattr(m, "reset_parameters"):
                m.reset_parameters()
        nn.init.normal_(self.cls_token, std=0.02)

    @property
    def num_tokens(self) -> int:
        return self.grid.num_patches + 1

    def edge_index(self, batch: int, device) -> Tensor:
        key = (batch, str(device))
        if key not in self._graphs:
            if self.attn_radius is None:
                ei = complete_graph(batch, self.num_tokens, device)
            else:
                pos = torch.as_tensor(self.grid.center_positions(), device=device)
                ei = radius_patch_graph(pos, self.attn_radius, batch, with_cls=True)
            self._graphs = {key: ei}
        return self._graphs[key]

    @torch.compiler.disable
    def _structure(self, batch: int, device) -> CSRStructure:
        """The patch graph's CSR structure for the blocks' fused attention, cached like the
        graph. Eager under ``torch.compile`` (one graph break): built there, it could be
        neither cached nor recognised as complete (batched products)."""
        key = (batch, str(device))
        if key not in self._csrs:  # with the transposed pattern gradients need (local graphs):
            # built here once, where it is cached, not inside every compiled call
            self._csrs = {key: CSRStructure.build(self.edge_index(batch, device), batch * self.num_tokens,
                                                  transpose=True)}
        return self._csrs[key]

    def invariants(self, cls: Tensor) -> Tensor:
        """Eq. (15): ``cls^triv (+) (||cls^rho_c||)_{rho != triv, c}``, shape ``(B, num_invariants)``."""
        vals = cls.index_select(-1, self.inv_values)
        if self.inv_feat.numel() == 0:
            return vals
        sq = cls.index_select(-1, self.inv_feat).pow(2)
        n = sq.new_zeros(*cls.shape[:-1], self.num_invariants - vals.shape[-1]).index_add_(-1, self.inv_group, sq)
        return torch.cat([vals, torch.sqrt(n + 1e-12)], -1)

    def tokens(self, images) -> Tensor:
        """Patch tokens after embedding and positional encoding, ``(B, num_patches, V.dim)``, of
        images or, with ``in_type``, of a ``GeometricTensor`` of that type."""
        if self.in_type is not None:
            return self.pos(self.patch_embed(self._pixels_from_geometric(images)))
        self._check_images(images)
        return self.pos(self.patch_embed(self.grid.to_pixels(images)))

    def _pixels_from_geometric(self, gt) -> Tensor:
        """A ``GeometricTensor`` of ``in_type`` to flat pixels ``(B, W.dim, S*S)`` in our
        frame and irreps basis."""
        from escnn.nn import GeometricTensor
        if not isinstance(gt, GeometricTensor):
            raise TypeError(f"images: this model was built with in_type={self.in_type} and takes an "
                            f"escnn GeometricTensor of that type, got {type(gt).__name__}")
        if gt.type != self.in_type:
            raise ValueError(f"images: expected a GeometricTensor of type in_type={self.in_type}, got one of "
                             f"type {gt.type}")
        t = gt.tensor
        S = self.grid.img_size
        if t.dim() != 4 or t.shape[-2:] != (S, S):
            raise ValueError(f"images: expected a GeometricTensor of shape (B, {self.in_type.size}, {S}, {S}), "
                             f"got {tuple(t.shape)}")
        if t.size(0) == 0:
            raise ValueError("images holds no image (batch size 0)")
        checks.floating("images", t, like=self.cls_token)
        return torch.einsum("oc,bcp->bop", self.in_basis.to(t.dtype), t.flatten(-2))

    def _check_images(self, images: Tensor) -> None:
        C = self.patch_embed.in_channels
        if type(images).__name__ == "GeometricTensor":
            raise TypeError("images: got an escnn GeometricTensor, but this model takes image tensors; build it "
                            "with EquivariantViT(..., in_type=gt.type) to read escnn fields")
        if not isinstance(images, Tensor) or images.dim() < 3:  # the grid checks the rest of the shape
            got = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
            raise ValueError(f"images must have shape (B, {C}, ...) (the grid's pixel layout), got {got}")
        if images.size(1) != C:
            raise ValueError(f"images must have {C} channels (in_channels), got {images.size(1)}")
        if images.size(0) == 0:
            raise ValueError("images holds no image (batch size 0)")
        checks.floating("images", images, like=self.cls_token)

    def features(self, images, return_all: bool = False, as_geometric_tensor: bool = False):
        """Backbone: tokens ``(B, num_patches + 1, V.dim)`` after the last block (class
        token first); with ``return_all`` the list after embedding and every block.

        With ``as_geometric_tensor=True`` (square grids) the patch tokens, class token
        apart, as an escnn ``GeometricTensor`` of type :attr:`out_type` and shape
        ``(B, out_type.size, S/P, S/P)``, one field per patch in the image's layout, for an
        escnn head (for example ``escnn.nn.GroupPooling(model.out_type)``); it transforms
        under ``GeometricTensor.transform(g)`` as the input does.
        """
        if as_geometric_tensor and self.grid.kind != "square":
            raise ValueError("as_geometric_tensor: escnn fields need grid='square'")
        x = self.tokens(images)
        B = x.shape[0]
        V = self.field_type
        cls = torch.cat([self.cls_token.to(x.dtype), x.new_zeros(V.dim - self.cls_token.numel())])
        x = torch.cat([cls.expand(B, 1, -1), x], dim=1)
        out = [x]
        h = x.reshape(B * self.num_tokens, -1)
        ei = self.edge_index(B, x.device)
        csr = self._structure(B, x.device)
        for blk in self.blocks:
            h = blk(h, ei, B, csr=csr)
            out.append(h.view(B, self.num_tokens, -1))
        if as_geometric_tensor:
            out = [self._to_geometric(t[:, 1:]) for t in out]
        return out if return_all else out[-1]

    @property
    def out_type(self):
        """The escnn ``FieldType`` of ``features(..., as_geometric_tensor=True)``: ``channels``
        copies of escnn's ``regular_repr`` when the token type is regular (the default), else
        one irrep field per channel; on the gspace of ``in_type`` (or of ``group``)."""
        if self._out_type is None:
            V = self.field_type
            gs = self.in_type.gspace if self.in_type is not None else escnn_gspace(self.group)
            regular = V == FieldType.regular(self.group, V.mult[self.group.irreps[0].name])
            ftype = to_escnn_type(V, gs, regular=regular)
            M = spatial_change_of_basis(ftype, self.group)[1]
            self._out_type = (ftype, torch.as_tensor(M, dtype=torch.float64))
        return self._out_type[0]

    def _to_geometric(self, tokens: Tensor):
        from escnn.nn import GeometricTensor
        ftype = self.out_type
        M = self._out_type[1].to(tokens.device, tokens.dtype)
        q = self.grid.img_size // self.grid.patch_size
        x = (tokens @ M).transpose(1, 2).reshape(tokens.shape[0], -1, q, q)  # x_escnn = M^T x_ours per token
        return GeometricTensor(x, ftype)

    def forward(self, images: Tensor) -> Tensor:
        """Invariant logits of a batch of images.

        Args:
            images: ``(B, in_channels, img_size, img_size)``; hex grids also take resampled
                pixels ``(B, in_channels, num_pixels)``; with ``in_type`` an escnn
                ``GeometricTensor`` of that type, ``(B, in_type.size, img_size, img_size)``.

        Returns:
            ``(B, num_classes)`` logits, ``G``-invariant: the class token after the last block
            and the final norm, invariantised (Eq. 15), through the linear head.
        """
        x = self.features(images)
        cls = self.norm(x[:, 0])
        return self.head(self.head_dropout(self.invariants(cls)))

    # ----------------------------------------------------------- restriction
    @torch.no_grad()
    def restrict(self, subgroup: Union[str, FiniteO2Group], tol: float = 1e-5) -> "EquivariantViT":
        """Theorem 2: an ``H``-equivariant ViT (``H <= G``) computing the same function.

        Token features are mapped by the ``H``-equivariant isometry ``Res: V -> W`` of
        :func:`~pyg_lie.vit.field_type.restriction_matrix`; every weight is transported
        (``A -> Res' A Res^T``, biases ``b -> Res' b``, the MLP's hidden spaces by
        ``FT_H o FT_G^{-1}`` on the same G-set viewed as an ``H``-set) and re-expressed in
        the ``H``-Schur parametrisation, so the new model is an ordinary ``H``-model that can
        be trained further with the smaller symmetry. The model itself is left unchanged.

        Raises:
            ValueError: ``subgroup`` is not a subgroup of ``group`` under the standard
                embedding (``n_H | n_G``, and cyclic if ``G`` is), or the model reads escnn
                fields (``in_type``).
            RuntimeError: a transported weight is not ``H``-equivariant within ``tol``
                (relative Schur projection residual; a bug, not a user error).
        """
        if self.in_type is not None:
            raise ValueError("restrict: a model reading escnn fields (in_type) cannot be restricted; restrict the "
                             "escnn stem and build an EquivariantViT of the subgroup with its out_type")
        G = self.group
        H = o2_group(subgroup)
        if G.n % H.n != 0 or (H.dihedral and not G.dihedral):
            raise ValueError(f"subgroup: {H.name} is not a subgroup of {G.name} (need n | {G.n}"
                             f"{'' if G.dihedral else ' and a cyclic subgroup'})")
        emb = G.subgroup_embedding(H)
        V = self.field_type
        W, Rn, source = restriction_matrix(V, H, emb)
        # attention heads and the invariantization follow the G channels
        head_ids = None
        if len(self.blocks):
            first = self.blocks[0].attn
            head_ids = [[first.head_ids[i][c] for (i, c) in source[s.name]] for s in H.irreps]
        values, groups = self._invariant_groups
        support = [set(np.nonzero(np.abs(Rn[:, j]) > 1e-9)[0].tolist()) for j in range(V.dim)]
        new_values = []
        for f in values:
            (row,) = support[f]  # a trivial feature of G restricts to one trivial feature of H
            new_values.append(row)
        new_groups = [sorted(set().union(*[support[f] for f in g])) for g in groups]
        cfg = dict(self.config)
        cfg.update(group=H, mlp_gset=self.gset.restrict(H, emb), field_type=W, head_ids=head_ids,
                   _invariant_groups=(new_values, new_groups))
        ref = next(self.parameters())
        new = EquivariantViT(**cfg).to(device=ref.device, dtype=ref.dtype)
        R = torch.as_tensor(Rn, dtype=torch.float64, device=ref.device)
        resid = []

        def load(lin, M, b, Rout, Rin):
            resid.append(lin.load_dense(Rout @ M.double() @ Rin.T, None if b is None else Rout @ b.double()))

        # patch embedding: dense filters F -> R F, re-expanded in the H orbit basis of C(U)
        pe, pe_new = self.patch_embed, new.patch_embed
        b = pe.linear.dense_bias()
        resid.append(pe_new.linear.load_dense(R @ pe.filters().double() @ pe_new.basis.double().T,
                                              None if b is None else R @ b.double()))
        resid.append(new.pos.load_encoding(self.pos.encoding().double() @ R.T))
        cls = torch.zeros(V.dim, dtype=torch.float64, device=ref.device)
        cls[: self.cls_token.numel()] = self.cls_token.double()
        cls_W = R @ cls
        Ct = new.cls_token.numel()
        new.cls_token.copy_(cls_W[:Ct])
        resid.append(float(cls_W[Ct:].norm()))

        # norms: per-channel scales follow their G channel, biases live on trivial channels
        ch_offset = np.cumsum([0] + [C for _, C, _ in V.blocks])
        ch_src = torch.as_tensor([int(ch_offset[i] + c) for s in H.irreps for (i, c) in source[s.name]],
                                 device=ref.device)
        trivial_src = source[H.irreps[0].name]

        def load_norm(nrm, nrm_new):
            if nrm.weight is not None:
                nrm_new.weight.copy_(nrm.weight[ch_src])
            if nrm.bias is not None:
                nrm_new.bias.zero_()
                for j, (i, c) in enumerate(trivial_src):
                    if i == 0:
                        nrm_new.bias[j] = nrm.bias[c]

        for blk, nb in zip(self.blocks, new.blocks):
            load_norm(blk.norm1, nb.norm1)
            load_norm(blk.norm2, nb.norm2)
            for name in ("q", "k", "v", "o"):
                lin = getattr(blk.attn, name)
                load(getattr(nb.attn, name), lin.dense_weight(), lin.dense_bias(), R, R)
            J = synthesis_matrix(nb.act).T @ synthesis_matrix(blk.act)  # FT_H o FT_G^-1: V'_G -> V'_H
            load(nb.mlp_in, blk.mlp_in.dense_weight(), blk.mlp_in.dense_bias(), J, R)
            load(nb.mlp_out, blk.mlp_out.dense_weight(), blk.mlp_out.dense_bias(), R, J)
        load_norm(self.norm, new.norm)
        new.head.load_state_dict(self.head.state_dict())
        worst = max(resid) if resid else 0.0
        if worst > tol:
            raise RuntimeError(f"restriction to {H.name} failed: Schur projection residual {worst:.2e}")
        return new.train(self.training)

    def count_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def macs_per_image(self) -> dict[str, int]:
        """Multiply-adds of the linear layers per image (patch embedding, q/k/v/o, MLP,
        head) and of the Fourier transforms, from the block structure."""
        Np, N = self.grid.num_patches, self.num_tokens
        lin = self.patch_embed.macs_per_token() * Np
        ft = 0
        for blk in self.blocks:
            lin += N * (blk.attn.macs_per_token() + blk.mlp_in.macs_per_token() + blk.mlp_out.macs_per_token())
            ft += N * blk.act.macs_per_token()
        lin += self.head.in_features * self.head.out_features
        return {"linear": lin, "fourier": ft}
