"""Sparse row buffers of the compiled solver's active structures, and dense helpers.

Active structure ``i`` lives in buffer row ``slots[i]``: indicator vectors are stored as
sparse rows (indices, values, width), and integer codes with a hash for lookups. Every
function is a ``numba.njit`` helper of :mod:`~keras_structured.engine.compiled_active_set`.
"""

from __future__ import annotations

import numba as nb
import numpy as np

# Odd multiplier of the code hash.
HASH_MULTIPLIER = 0x5851F42D4C957F2D

@nb.njit(cache=True, nogil=True)
def dot(a, b):
    total = 0.0
    for i in range(a.shape[0]):
        total += a[i] * b[i]
    return total


# Active structure i lives in buffer row slots[i]; rows slots[k:] are free, so
# dropping a structure only shifts the small ``slots`` array, never buffer rows.
# Rows are sparse (indices, values, width): indicator vectors have few nonzeros.


@nb.njit(cache=True, nogil=True)
def row_dot(indices, values, widths, row, dense):
    total = 0.0
    for j in range(widths[row]):
        total += values[row, j] * dense[indices[row, j]]
    return total


@nb.njit(cache=True, nogil=True)
def row_dots(indices, values, widths, slots, k, dense, out):
    """``out[i] = <row slots[i], dense>`` for the k active rows, two rows at a time
    (two independent sums, each in the order of :func:`row_dot`)."""
    for i in range(0, k - 1, 2):
        first, second = slots[i], slots[i + 1]
        common = min(widths[first], widths[second])
        total_first = total_second = 0.0
        for j in range(common):
            total_first += values[first, j] * dense[indices[first, j]]
            total_second += values[second, j] * dense[indices[second, j]]
        for j in range(common, widths[first]):
            total_first += values[first, j] * dense[indices[first, j]]
        for j in range(common, widths[second]):
            total_second += values[second, j] * dense[indices[second, j]]
        out[i], out[i + 1] = total_first, total_second
    if k % 2:
        out[k - 1] = row_dot(indices, values, widths, slots[k - 1], dense)


@nb.njit(cache=True, nogil=True)
def store_row(indices, values, widths, row, new_indices, new_values, count):
    """Store a sparse vector in ``row``, widening the buffers if needed."""
    if count > indices.shape[1]:
        wider_indices = np.zeros((indices.shape[0], 2 * count), np.int64)
        wider_values = np.zeros((indices.shape[0], 2 * count))
        copy_into(indices, wider_indices)
        copy_into(values, wider_values)
        indices, values = wider_indices, wider_values
    for j in range(count):
        indices[row, j] = new_indices[j]
        values[row, j] = new_values[j]
    widths[row] = count
    return indices, values


@nb.njit(cache=True, nogil=True)
def sparse_dot(indices, values, count, dense):
    total = 0.0
    for j in range(count):
        total += values[j] * dense[indices[j]]
    return total


@nb.njit(cache=True, nogil=True)
def shared_parts(codes, slots, k, code, out):
    """``out[i] = <m_i, m>`` for the k active rows, from the codes alone: structures with
    ``one_hot_codes`` share a part wherever their codes hold the same nonnegative entry."""
    for i in range(k):
        row = codes[slots[i]]
        total = 0
        for j in range(code.shape[0]):
            total += (row[j] == code[j]) & (code[j] >= 0)
        out[i] = total


@nb.njit(cache=True, nogil=True)
def clear(Mi, Mw, slots, k, m_indices, count_u, dense):
    """Zero the entries of ``dense`` that ``m`` or an active row touches."""
    for j in range(count_u):
        dense[m_indices[j]] = 0.0
    for i in range(k):
        row = slots[i]
        for j in range(Mw[row]):
            dense[Mi[row, j]] = 0.0


@nb.njit(cache=True, nogil=True)
def hash_code(code):
    """A hash of an integer code: active codes are compared in full only on equal hashes."""
    total = 0
    for j in range(code.shape[0]):
        total = total * HASH_MULTIPLIER + code[j]  # wraps around: fine for a hash
    return total


@nb.njit(cache=True, nogil=True)
def find(Cb, Ch, slots, k, code, code_hash):
    for i in range(k):
        if Ch[slots[i]] != code_hash:
            continue
        row = Cb[slots[i]]
        same = True
        for j in range(code.shape[0]):
            if row[j] != code[j]:
                same = False
                break
        if same:
            return i
    return -1


@nb.njit(cache=True, nogil=True)
def grow_2d(buffer, rows):
    grown = np.zeros((rows, buffer.shape[1]), buffer.dtype)
    copy_into(buffer, grown)
    return grown


@nb.njit(cache=True, nogil=True)
def grow_1d(buffer, rows):
    grown = np.zeros(rows, buffer.dtype)
    for i in range(buffer.shape[0]):
        grown[i] = buffer[i]
    return grown


# Explicit loops instead of slice assignments, here and in the kernel: numba compiles a
# broadcasting assignment with its error-message formatting, seconds per signature. For the
# same reason the kernel passes np.bool_/np.int64 values, not literals: a literal argument
# type compiles the callee once more.
@nb.njit(cache=True, nogil=True)
def copy_into(source, target):
    """``target[:rows, :columns] = source`` for a 2-d ``source`` no larger than ``target``."""
    for i in range(source.shape[0]):
        for j in range(source.shape[1]):
            target[i, j] = source[i, j]


@nb.njit(cache=True, nogil=True)
def combine(indices, values, widths, slots, y, k, out):
    """Write ``sum_i y_i row_i`` into the dense vector ``out``."""
    out[:] = 0.0
    for i in range(k):
        row = slots[i]
        for j in range(widths[row]):
            out[indices[row, j]] += y[i] * values[row, j]


@nb.njit(cache=True, nogil=True)
def active_rows(indices, values, widths, slots, k):
    """Index/value lists of the active rows, as :func:`keras_structured.engine.jacobian.sparse_rows`."""
    width = 0
    for i in range(k):
        width = max(width, widths[slots[i]])
    out_indices, out_values = np.zeros((k, width), np.int64), np.zeros((k, width))
    for i in range(k):
        row = slots[i]
        for j in range(widths[row]):
            out_indices[i, j], out_values[i, j] = indices[row, j], values[row, j]
    return out_indices, out_values
