"""Coordinate frame conventions for poses, and the exact change of basis between them.

- ``"ros"`` (REP-103): x forward, y left, z up
- ``"optical"`` (camera): x right, y down, z forward
- ``"opengl"``: x right, y up, z back

A pose ``(x, y, z, qx, qy, qz, qw)`` maps body coordinates to world coordinates. Changing
convention re-expresses both in the new axes: ``p' = R p`` and ``Q' = R Q Rᵀ``, where ``R``
maps vectors written in the old axes to the new ones. No I/O; numpy only.
"""

from __future__ import annotations

import numpy as np

from rayform.errors import InvalidInput

FRAMES = ("ros", "optical", "opengl")

# Rows: each new axis written in ROS axes.
_FROM_ROS = {
    "ros": np.eye(3),
    "optical": np.array([[0.0, -1.0, 0.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0]]),
    "opengl": np.array([[0.0, -1.0, 0.0], [0.0, 0.0, 1.0], [-1.0, 0.0, 0.0]]),
}


def _frame(frame: str) -> str:
    checked = check_frame(frame)
    assert checked is not None
    return checked


def check_frame(frame: str | None) -> str | None:
    if frame is not None and frame not in FRAMES:
        raise InvalidInput(f"frame {frame!r}: one of {', '.join(FRAMES)}, or None for as recorded")
    return frame


def basis(src: str, dst: str) -> np.ndarray:
    """The rotation taking vectors written in ``src`` axes to ``dst`` axes."""
    result: np.ndarray = _FROM_ROS[_frame(dst)] @ _FROM_ROS[_frame(src)].T
    return result


def quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of ``(..., 4)`` quaternions in (x, y, z, w) order."""
    ax, ay, az, aw = np.moveaxis(a, -1, 0)
    bx, by, bz, bw = np.moveaxis(b, -1, 0)
    return np.stack([
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    ], axis=-1)


def matrix_to_quat(m: np.ndarray) -> np.ndarray:
    """(x, y, z, w) of a proper rotation matrix (Shepperd's method, stable for all angles)."""
    t = np.trace(m)
    if t > 0:
        s = 2.0 * np.sqrt(1.0 + t)
        q = [(m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, s / 4]
    else:
        i = int(np.argmax(np.diag(m)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * np.sqrt(1.0 + m[i, i] - m[j, j] - m[k, k])
        q = [0.0, 0.0, 0.0, (m[k, j] - m[j, k]) / s]
        q[i] = s / 4
        q[j] = (m[j, i] + m[i, j]) / s
        q[k] = (m[k, i] + m[i, k]) / s
    quat = np.asarray(q)
    result: np.ndarray = quat / np.linalg.norm(quat)
    return result


def convert_poses(poses: np.ndarray, src: str, dst: str | None) -> np.ndarray:
    """Poses ``(..., 7)`` recorded in ``src`` re-expressed in ``dst`` (None: unchanged)."""
    if dst is None or dst == src:
        return poses
    r = basis(src, dst)
    qr = matrix_to_quat(r)
    qr_inv = qr * np.array([-1.0, -1.0, -1.0, 1.0])
    out = np.empty(poses.shape, np.float64)
    out[..., :3] = poses[..., :3] @ r.T
    out[..., 3:] = quat_multiply(quat_multiply(np.broadcast_to(qr, poses[..., 3:].shape), poses[..., 3:]), qr_inv)
    return out.astype(poses.dtype, copy=False)


ROTATIONS = {"quat": 4, "rot6d": 6, "axis_angle": 3}  # a rotation's representation and its size


def quat_conjugate(q: np.ndarray) -> np.ndarray:
    """The inverse of unit quaternions ``(..., 4)`` in (x, y, z, w) order."""
    result: np.ndarray = q * np.array([-1.0, -1.0, -1.0, 1.0])
    return result


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrices ``(..., 3, 3)`` of unit quaternions ``(..., 4)`` (x, y, z, w)."""
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    x, y, z, w = np.moveaxis(q, -1, 0)
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], axis=-1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], axis=-1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], axis=-1),
    ], axis=-2)


def rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Vectors ``(..., 3)`` rotated by unit quaternions ``(..., 4)``."""
    result: np.ndarray = np.einsum("...ij,...j->...i", quat_to_matrix(q), v)
    return result


def represent(q: np.ndarray, rotation: str) -> np.ndarray:
    """Unit quaternions ``(..., 4)`` as ``"quat"`` (x, y, z, w, w ≥ 0), ``"rot6d"`` (the first
    two columns of the matrix, column after column) or ``"axis_angle"`` (axis × angle, radians)."""
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    q = np.where(q[..., 3:] < 0, -q, q)  # q and −q are one rotation: the one with w ≥ 0
    if rotation == "quat":
        return q
    if rotation == "rot6d":
        m = quat_to_matrix(q)
        return np.concatenate([m[..., :, 0], m[..., :, 1]], axis=-1)
    if rotation == "axis_angle":
        sin = np.linalg.norm(q[..., :3], axis=-1, keepdims=True)
        angle = 2 * np.arctan2(sin, q[..., 3:])
        scale = np.divide(angle, sin, out=np.full_like(sin, 2.0), where=sin > 1e-12)  # small angles: 2·v
        result: np.ndarray = q[..., :3] * scale
        return result
    raise ValueError(f"rotation {rotation!r}: one of {', '.join(ROTATIONS)}")


def relative_poses(poses: np.ndarray) -> np.ndarray:
    """Each pose ``poses[..., k, :]`` ``(..., K, 7)`` seen from ``poses[..., 0, :]``: ``T₀⁻¹ · Tₖ``
    (translation in the first pose's axes, then the rotation from it), as ``(..., K, 7)``."""
    p0, q0 = poses[..., :1, :3], poses[..., :1, 3:]
    inv = np.broadcast_to(quat_conjugate(q0 / np.linalg.norm(q0, axis=-1, keepdims=True)), poses[..., 3:].shape)
    out = np.empty(poses.shape, np.float64)
    out[..., :3] = rotate(inv, poses[..., :3] - p0)
    out[..., 3:] = quat_multiply(inv, poses[..., 3:])
    return out
