"""ROS 1 bags, ROS 2 bags (sqlite3 or MCAP storage) and standalone MCAP files into segments.

Read with ``rosbags`` (its ``AnyReader``; for ROS 1 bags whose embedded message
definitions are too old for it, ``rosbags.rosbag1.Reader`` with the ROS 1 Noetic
typestore). One segment per bag. Messages:

==================================  ==============================================================
``sensor_msgs/Image``               raw frames (rgb8, bgr8 → rgb, mono8, 16UC1 depth, 32FC1 depth)
``sensor_msgs/CompressedImage``     the JPEG/PNG bytes as recorded
``sensor_msgs/JointState``          ``<topic>/position``, ``/velocity``, ``/effort`` in a fixed
                                    joint order (the first message's, or ``joints=``)
``geometry_msgs/PoseStamped``,      pose streams (x, y, z, qx, qy, qz, qw), frame ``ros``
``…/PoseWithCovarianceStamped``,
``nav_msgs/Odometry``
``tf2_msgs/TFMessage``              each parent→child transform as a pose stream ``tf/<parent>/<child>``
``sensor_msgs/CameraInfo``          kept in the segment's metadata under ``camera_info``
``foxglove_msgs/CompressedVideo``   a video stream, its packets as recorded (H.264, H.265, AV1;
                                    ``ros_video``)
==================================  ==============================================================

Timestamps: the header stamp when it is set, the log time otherwise (``stamp="log"``
always takes the log time). Stream names come from topics (``/joint_states`` →
``joint_states/...``); ``mapping`` renames or (``None``) skips a topic.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rayform.converters import ros_video
from rayform.converters.stream_names import StreamNames
from rayform.errors import InvalidInput
from rayform.recordings.streams import ArrayStream, ImageStream, PoseStream, Stream

IMAGE = {"sensor_msgs/msg/Image"}
COMPRESSED = {"sensor_msgs/msg/CompressedImage"}
JOINTS = {"sensor_msgs/msg/JointState"}
POSES = {"geometry_msgs/msg/PoseStamped", "geometry_msgs/msg/PoseWithCovarianceStamped", "nav_msgs/msg/Odometry"}
TF = {"tf2_msgs/msg/TFMessage"}
CAMERA_INFO = {"sensor_msgs/msg/CameraInfo"}
SUPPORTED = IMAGE | COMPRESSED | JOINTS | POSES | TF | CAMERA_INFO | {ros_video.MSGTYPE}
ENCODINGS = {"rgb8": (np.uint8, 3), "bgr8": (np.uint8, 3), "mono8": (np.uint8, 1), "16UC1": (np.uint16, 1),
             "mono16": (np.uint16, 1), "32FC1": (np.float32, 1)}


def stream_base(topic: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_\-/]", "_", topic.strip("/")) or "topic"
    return re.sub(r"/+", "/", name)


def _messages(path: Path) -> Iterator[tuple[str, str, int, Any]]:
    """(topic, msgtype, log time ns, message) for every message of a supported type."""
    from rosbags.highlevel import AnyReader, AnyReaderError
    from rosbags.typesys import Stores, get_typestore

    yielded = False
    try:
        with AnyReader([path], default_typestore=get_typestore(Stores.ROS2_HUMBLE)) as reader:
            conns = [c for c in reader.connections if c.msgtype in SUPPORTED]
            for conn, t, raw in reader.messages(connections=conns):
                yield conn.topic, conn.msgtype, int(t), reader.deserialize(raw, conn.msgtype)
                yielded = True
        return
    except AnyReaderError as e:
        if "is unknown" not in str(e) or path.suffix != ".bag" or yielded:
            raise InvalidInput(f"{path}: cannot read the bag ({e})") from None
    except Exception as e:  # rosbags raises its own reader errors, struct errors on truncation
        raise InvalidInput(f"{path}: cannot read the bag ({type(e).__name__}: {e})") from None
    yield from _messages_ros1_fallback(path)


def _messages_ros1_fallback(path: Path) -> Iterator[tuple[str, str, int, Any]]:
    # Old bags embed definitions (e.g. roslib/Header) AnyReader cannot resolve: use the
    # stock ROS 1 Noetic types instead.
    from rosbags.rosbag1 import Reader
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS1_NOETIC)
    try:
        with Reader(path) as reader:
            conns = [c for c in reader.connections if c.msgtype in SUPPORTED]
            for conn, t, raw in reader.messages(connections=conns):
                yield conn.topic, conn.msgtype, int(t), store.deserialize_ros1(raw, conn.msgtype)
    except Exception as e:
        raise InvalidInput(f"{path}: cannot read the bag with the ROS 1 typestore either ({type(e).__name__}: {e})") from None


def _stamp(msg: Any, log_ns: int, use: str) -> int:
    header = getattr(msg, "header", None)
    if use == "header" and header is not None:
        ns = int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)
        if ns > 0:
            return ns
    return log_ns


def _pose_of(msg: Any, msgtype: str) -> list[float]:
    pose = msg.pose.pose if msgtype != "geometry_msgs/msg/PoseStamped" else msg.pose
    p, q = pose.position, pose.orientation
    return [p.x, p.y, p.z, q.x, q.y, q.z, q.w]


def _image(msg: Any, topic: str) -> np.ndarray:
    if msg.encoding not in ENCODINGS:
        raise InvalidInput(f"{topic}: image encoding {msg.encoding!r} is not one of {', '.join(ENCODINGS)}")
    dtype, channels = ENCODINGS[msg.encoding]
    data = np.frombuffer(bytes(msg.data), dtype=np.dtype(dtype).newbyteorder(">" if msg.is_bigendian else "<"))
    rows = data.reshape(msg.height, -1)[:, : msg.width * channels]
    image = rows.reshape(msg.height, msg.width, channels) if channels > 1 else rows.reshape(msg.height, msg.width)
    return image[..., ::-1].copy() if msg.encoding == "bgr8" else image.astype(dtype, copy=False)


def read_bag(path: str | Path, mapping: Mapping[str, str | None] | None = None, stamp: str = "header",
             joints: list[str] | None = None) -> tuple[str, list[Stream], dict[str, Any]]:
    """One bag as a segment's name, streams and metadata."""
    path = Path(path)
    if not path.exists():
        raise InvalidInput(f"{path}: no such bag")
    named = StreamNames(str(path), stream_base, mapping, "topic")
    series: dict[str, dict[str, Any]] = defaultdict(lambda: {"t": [], "v": []})
    kinds: dict[str, str] = {}
    names: dict[str, list[str]] = {}
    camera_info: dict[str, dict[str, Any]] = {}
    for topic, msgtype, log_ns, msg in _messages(path):
        base = named.of(topic)
        if base is None:
            continue
        if msgtype in CAMERA_INFO:
            camera_info.setdefault(topic, {"width": int(msg.width), "height": int(msg.height),
                                           # ROS 1 names them K and D, ROS 2 k and d
                                           "k": [float(x) for x in getattr(msg, "k", getattr(msg, "K", []))],
                                           "d": [float(x) for x in getattr(msg, "d", getattr(msg, "D", []))],
                                           "distortion_model": msg.distortion_model})
            continue
        if msgtype in TF:
            for tr in msg.transforms:
                name = f"tf/{stream_base(tr.header.frame_id)}/{stream_base(tr.child_frame_id)}"
                t, r = tr.transform.translation, tr.transform.rotation
                s = series[name]
                kinds[name] = "pose"
                s["t"].append(_stamp(tr, log_ns, stamp))
                s["v"].append([t.x, t.y, t.z, r.x, r.y, r.z, r.w])
            continue
        t = _stamp(msg, log_ns, stamp)
        if msgtype in POSES:
            kinds[base] = "pose"
            series[base]["t"].append(t)
            series[base]["v"].append(_pose_of(msg, msgtype))
        elif msgtype in COMPRESSED:
            kinds[base] = "compressed"
            series[base]["t"].append(t)
            series[base]["v"].append(bytes(msg.data))
        elif msgtype == ros_video.MSGTYPE:
            kinds[base] = "video"
            series[base]["t"].append(int(msg.timestamp.sec) * 1_000_000_000 + int(msg.timestamp.nanosec)
                                     if stamp == "header" and int(msg.timestamp.sec) > 0 else log_ns)
            series[base]["v"].append((bytes(msg.data), str(msg.format)))
            series[base].setdefault("topic", topic)
        elif msgtype in IMAGE:
            kinds[base] = "image"
            series[base]["t"].append(t)
            series[base]["v"].append(_image(msg, topic))
        elif msgtype in JOINTS:
            order = names.setdefault(base, list(joints or msg.name))
            index = {n: i for i, n in enumerate(msg.name)}
            missing = [n for n in order if n not in index]
            if missing:
                raise InvalidInput(f"{path}: {topic} at {t} ns lacks joint(s) {', '.join(missing[:3])}")
            pick = [index[n] for n in order]
            for field in ("position", "velocity", "effort"):
                values = np.asarray(getattr(msg, field), np.float64)
                if len(values) == len(msg.name):
                    s = series[f"{base}/{field}"]
                    kinds[f"{base}/{field}"] = "joints"
                    s["t"].append(t)
                    s["v"].append(values[pick])
    named.check()  # a topic the user mapped is one the bag has, of a type rayform converts
    if not series:
        raise InvalidInput(
            f"{path}: no message of a type rayform converts; it has {_topics(path)}. "
            f"Converted: {', '.join(sorted(SUPPORTED))}"
        )
    streams: list[Stream] = []
    for name, s in sorted(series.items()):
        ts = np.asarray(s["t"], np.int64)
        by_time = np.argsort(ts, kind="stable")  # header stamps need not arrive in order
        ts = ts[by_time]
        ordered = [s["v"][i] for i in by_time.tolist()]
        if kinds[name] == "pose":
            v: np.ndarray = np.asarray(ordered, np.float64)
            v[:, 3:] /= np.linalg.norm(v[:, 3:], axis=1, keepdims=True).clip(min=1e-12)
            streams.append(PoseStream(name, ts, v, frame="ros"))
        elif kinds[name] == "compressed":
            streams.append(ImageStream(name, ts, ordered))
        elif kinds[name] == "video":
            streams.append(ros_video.video_stream(name, ts, [p for p, _ in ordered], [f for _, f in ordered], path,
                                                  s["topic"]))
        elif kinds[name] == "image":
            streams.append(ImageStream(name, ts, np.stack(ordered)))
        else:
            base = name.rsplit("/", 1)[0]
            unit = {"position": "rad", "velocity": "rad/s", "effort": "N·m"}[name.rsplit("/", 1)[1]]
            streams.append(ArrayStream(name, ts, np.asarray(ordered, np.float64), units=unit, names=names[base]))
    meta = {"source": f"rosbag {path.name}", "camera_info": camera_info, "stamp": stamp}
    return path.stem if path.is_file() else path.name, streams, meta


def _topics(path: Path) -> str:
    try:
        return ", ".join(line.split()[0] + " (" + line.split()[1] + ")" for line in describe_bag(path)[1:]) or "no topics"
    except InvalidInput:
        return "topics that cannot be listed"


def describe_bag(path: str | Path) -> list[str]:
    """Topics, types, counts, rates and duration of a bag."""
    from rosbags.highlevel import AnyReader, AnyReaderError
    from rosbags.rosbag1 import Reader
    from rosbags.typesys import Stores, get_typestore

    path = Path(path)
    reader: Any
    try:
        reader = AnyReader([path], default_typestore=get_typestore(Stores.ROS2_HUMBLE))
        reader.open()
    except AnyReaderError:
        reader = Reader(path)
        reader.open()
    except Exception as e:
        raise InvalidInput(f"{path}: cannot read the bag ({type(e).__name__}: {e})") from None
    try:
        seconds = max(reader.duration, 1) / 1e9
        lines = [f"{path}: {seconds:.3f} s, {sum(c.msgcount for c in reader.connections)} messages"]
        for c in sorted(reader.connections, key=lambda c: c.topic):
            mark = "" if c.msgtype in SUPPORTED else "  (not converted)"
            lines.append(f"  {c.topic:40} {c.msgtype:44} {c.msgcount:7d}  {c.msgcount / seconds:8.2f} Hz{mark}")
        return lines
    finally:
        reader.close()
