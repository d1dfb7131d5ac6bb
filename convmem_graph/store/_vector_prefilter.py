"""A first pass for the turn vectors' scan: the memory's leading principal axes, with a bound.

A search scores every row of a memory's int8 matrix (:mod:`convmem_graph.store._vectors`); at 100k
turns that scan is most of a hybrid call start. Real sentence embeddings are far from isotropic:
on 788 LoCoMo turns embedded by multilingual-e5-small the first 128 of 384 principal axes hold
89 % of the variance around the mean (random directions: ~40 %). This pass keeps, per memory, each
row's coordinates on those axes (``x - mean`` projected, as int8 with a per-row scale: 132 bytes a
turn at 384 dimensions) and scores them first, a third of the full scan's work. The rest of the
score, the query's product with each row's residual (the other axes) plus the int8 rounding, is
treated as noise of standard deviation ``sigma`` read from the memory's own spectrum for this
query (``sqrt(sum over the other axes of variance_j * q_j**2)``): a row can reach the exact top
``k`` only if its partial score is within ``2 z sigma`` of the ``k``-th best partial score (a miss
needs a residual beyond ``z`` deviations; ``z = 4``, chosen from the Gaussian tail, not tuned on
the benchmarks). Only those rows go on to the int8 two-step scoring (which returns the same
cosines as without the pass).

Where the spectrum is flat (random vectors: the leading third of the axes holds ~40 %) that
window would pass most rows: before the pass, the share it would pass is estimated from the same
spectrum (both scores taken as Gaussian), and when it is over :data:`MAX_SHARE` the pass is
skipped (the whole matrix is scanned as before); after the pass, if more than that share passed,
the whole matrix is scanned too. So the pass never changes which rows can be returned beyond the
stated bound, and costs nothing where it cannot help but the spectrum check.

The first axis is the rows' mean direction, the others principal axes orthogonal to it
(:func:`_axes`): a sentence model's query lies mostly along that mean, so the rows' small spread
along it must be scored in the pass, not left in the residual (measured in ``benchmarks/README.md``,
tenth session, H4: on LoCoMo conversations 5-8's spectrum the pass went from skipped for 39 of 40
queries to ~2 % of the rows passed).

The axes are fitted on a sample of the memory's rows when its matrix is read (memories of
:data:`MIN_ROWS` rows or more), rows appended later are projected on the same axes, and the
axes are fitted again once the memory has grown by :data:`REFIT_GROWTH` since (the cached
matrix is rebuilt whole after any delete or replacement, so a fit never covers removed rows).
Measured in ``benchmarks/README.md`` (issue 23, the dense scan's first pass, seventh session, H2).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import numpy as np

__all__ = ["LEAD", "MAX_SHARE", "MIN_ROWS", "REFIT_GROWTH", "Prefilter", "candidates", "extend", "fit"]

#: Leading axes kept per row (of 384 for e5-small: a third of the scan's bytes).
LEAD = 128
#: Memories with fewer rows are scanned whole: below ~20k rows the pass's fixed costs (the
#: partition of its scores, the second step's gather) ate what it saved (10k: 2.1 against 1.7 ms).
MIN_ROWS = 16384
#: The pass is skipped, or its result dropped, when it would pass more than this share of rows.
MAX_SHARE = 0.25
#: Fit the axes again once the rows appended since the fit reach this share of the fitted rows.
REFIT_GROWTH = 0.25
#: Deviations of the residual a row may need to reach the top ``k`` and still be passed.
Z = 4.0
_SAMPLE = 4096  # rows the axes are fitted on (evenly spaced over the memory)
_BLOCK = 2048  # rows converted to float32 per BLAS call in the pass
_FINE = 254.0  # as in _vectors: the second int8 holds the first one's rounding error times this


@dataclass(frozen=True)
class Prefilter:
    """One memory's leading-axes codes, as :func:`candidates` reads them (never changed once built)."""

    fitted_rows: int  # rows when the axes were fitted
    mean: np.ndarray  # float32 (dim,): the fitted rows' mean
    axes: np.ndarray  # float32 (dim, dim): principal axes as rows, by decreasing variance
    variances: np.ndarray  # float32 (dim,): the variance along each axis
    codes: np.ndarray  # int8 (rows, LEAD): round(((x - mean) @ axes[:LEAD].T) / scale)
    scale: np.ndarray  # float32 (rows,)
    rounding: float  # mean of scale**2 / 12: the variance of a code's rounding, per unit of |q|**2

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays."""
        arrays = (self.mean, self.axes, self.variances, self.codes, self.scale)
        return int(sum(a.nbytes for a in arrays))


def _rows(coarse: np.ndarray, fine: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """float32 vectors back from the two int8 matrices (to ~1e-5 of the stored float16)."""
    import numpy as np

    out = coarse.astype(np.float32)
    out += fine / np.float32(_FINE)
    out *= scale[:, None]
    return cast("np.ndarray", out)


def _codes(
    coarse: np.ndarray, fine: np.ndarray, scale: np.ndarray, mean: np.ndarray, lead: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rows projected on ``lead`` (around ``mean``) as int8 codes with a per-row scale."""
    import numpy as np

    n = len(coarse)
    codes = np.empty((n, len(lead)), dtype=np.int8)
    scales = np.empty(n, dtype=np.float32)
    step = 8192  # bounds the float32 copies
    for start in range(0, n, step):
        end = min(n, start + step)
        projected = (_rows(coarse[start:end], fine[start:end], scale[start:end]) - mean) @ lead.T
        top = np.abs(projected).max(axis=1) / 127.0
        top[top == 0] = 1.0
        codes[start:end] = np.rint(projected / top[:, None])
        scales[start:end] = top
    return codes, scales


def _axes(cov: np.ndarray, mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Orthonormal axes as rows (the mean's direction first) and each one's variance under ``cov``.

    A query of a sentence model points mostly along its vectors' mean (~0.9 of its squared norm on
    LoCoMo turns by e5), so the rows' spread along that one direction, small as it is, weighs on a
    score ~0.9 times; left among the trailing axes (where ``eigh`` can put it: unit vectors vary
    little along their mean) it made the residual's deviation 5x the pass's on one conversation set
    and the pass was skipped for every query. So the first axis is the mean's direction and the rest
    are the principal axes of ``cov`` within the plane orthogonal to it, by decreasing variance:
    the trailing block is still uncorrelated axis by axis (the residual's variance a diagonal sum).
    """
    import numpy as np

    dim = len(mean)
    norm = float(np.linalg.norm(mean))
    if norm <= 1e-6:  # no mean direction to speak of (centred data): plain principal axes
        variances, vectors = np.linalg.eigh(cov)  # ascending
        return vectors[:, ::-1].T, np.clip(variances[::-1], 0.0, None)
    along = mean / norm
    flat = np.eye(dim) - np.outer(along, along)  # projection on the plane orthogonal to the mean
    variances, vectors = np.linalg.eigh(flat @ cov @ flat)  # ascending; one ~0 value: `along` itself
    keep = np.argsort(np.abs(vectors.T @ along))[: dim - 1]  # every eigenvector but `along`'s
    keep = keep[np.argsort(-variances[keep], kind="stable")]
    axes = np.vstack([along, vectors[:, keep].T])
    return axes, np.clip(np.concatenate([[along @ cov @ along], variances[keep]]), 0.0, None)


def fit(coarse: np.ndarray, fine: np.ndarray, scale: np.ndarray) -> Prefilter | None:
    """The memory's pass (axes fitted on a sample of its rows); ``None`` below :data:`MIN_ROWS`."""
    import numpy as np

    n, dim = coarse.shape
    if n < MIN_ROWS or dim <= LEAD:
        return None
    sample = np.linspace(0, n - 1, min(n, _SAMPLE)).astype(np.int64)
    x = _rows(coarse[sample], fine[sample], scale[sample]).astype(np.float64)
    mean = x.mean(axis=0)
    x -= mean
    axes64, variances64 = _axes(x.T @ x / len(x), mean)
    variances = variances64.astype(np.float32)
    axes = np.ascontiguousarray(axes64).astype(np.float32)
    mean32 = mean.astype(np.float32)
    codes, scales = _codes(coarse, fine, scale, mean32, axes[:LEAD])
    rounding = float(np.mean(scales.astype(np.float64) ** 2)) / 12.0
    return Prefilter(n, mean32, axes, variances, codes, scales, rounding)


def extend(pre: Prefilter, coarse: np.ndarray, fine: np.ndarray, scale: np.ndarray) -> Prefilter | None:
    """``pre`` for the whole matrix after rows were appended (``coarse``... are all of its rows).

    The appended rows are projected on the same axes, until the memory has grown by
    :data:`REFIT_GROWTH` since the fit: then the axes are fitted again on all the rows.
    """
    import numpy as np

    n = len(coarse)
    if n - pre.fitted_rows >= REFIT_GROWTH * pre.fitted_rows or coarse.shape[1] != len(pre.mean):
        return fit(coarse, fine, scale)
    old = len(pre.codes)
    codes, scales = _codes(coarse[old:], fine[old:], scale[old:], pre.mean, pre.axes[:LEAD])
    return Prefilter(
        pre.fitted_rows,
        pre.mean,
        pre.axes,
        pre.variances,
        np.concatenate([pre.codes, codes]),
        np.concatenate([pre.scale, scales]),
        pre.rounding,
    )


_NORMAL = NormalDist()


def candidates(pre: Prefilter, q: np.ndarray, k: int) -> np.ndarray | None:
    """Rows (ascending) that may hold the exact top ``k`` for unit ``q``; ``None``: scan them all."""
    import numpy as np

    n = len(pre.codes)
    if k >= n:
        return None
    rotated = pre.axes @ q
    lead = np.ascontiguousarray(rotated[:LEAD])
    lead2 = lead.astype(np.float64) ** 2
    spread = float(pre.variances[:LEAD] @ lead2)
    noise = float(pre.variances[LEAD:] @ rotated[LEAD:].astype(np.float64) ** 2) + pre.rounding * float(
        lead2.sum()
    )
    if spread <= 0.0:
        return None
    window = 2.0 * Z * noise**0.5
    # The share passed if both the partial scores and the residuals were Gaussian: skip a pass
    # that would keep too many rows to pay for itself.
    expected = 1.0 - _NORMAL.cdf(_NORMAL.inv_cdf(1.0 - k / n) - window / spread**0.5)
    if expected > MAX_SHARE:
        return None
    partial = np.empty(n, dtype=np.float32)
    buf = np.empty((min(_BLOCK, n), LEAD), dtype=np.float32)
    for start in range(0, n, _BLOCK):
        part = pre.codes[start : start + _BLOCK]
        block = buf[: len(part)]
        np.copyto(block, part, casting="unsafe")
        np.dot(block, lead, out=partial[start : start + len(part)])
    partial *= pre.scale
    kth = float(np.partition(partial, n - k)[n - k])
    rows = np.flatnonzero(partial >= kth - window)
    if len(rows) > MAX_SHARE * n:
        return None
    return cast("np.ndarray", rows)
