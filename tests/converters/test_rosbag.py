"""ROS 1 / ROS 2 bags and MCAP: the real recordings of ../shared/data/real, and bags written
here with rosbags' own writers (images and joint states at different rates)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import rayform
from rayform.converters.rosbag import describe_bag, read_bag
from rayform.errors import InvalidInput


def _reader_counts(path):
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    with AnyReader([path], default_typestore=get_typestore(Stores.ROS2_HUMBLE)) as r:
        return {c.topic: c.msgcount for c in r.connections}


def test_compressed_image_kept_as_recorded_and_camera_info_as_metadata(real_data):
    from rosbags.highlevel import AnyReader

    path = real_data / "fiducials/aruco_images.bag"
    name, streams, meta = read_bag(path)
    [image] = [s for s in streams if s.name == "raspicam_node/image/compressed"]
    with AnyReader([path]) as r:
        [conn] = [c for c in r.connections if c.msgtype == "sensor_msgs/msg/CompressedImage"]
        [(_, _, raw)] = list(r.messages(connections=[conn]))
        recorded = bytes(r.deserialize(raw, conn.msgtype).data)
    assert image.frames == [recorded] and len(recorded) == 593_883
    assert meta["camera_info"]["/raspicam_node/camera_info"]["width"] == 1280


def test_old_ros1_definitions_fall_back_to_the_noetic_typestore(real_data):
    _, streams, _ = read_bag(real_data / "robot_state_publisher/joint_states_indexed.bag")
    by = {s.name: s for s in streams}
    assert set(by) == {"joint_states/position", "joint_states/velocity", "joint_states/effort"}
    pos = by["joint_states/position"]
    assert pos.values.shape == (1598, 42) and len(pos.names) == 42
    assert 290e9 < pos.timestamps[0] < 292e9  # header stamps (sim clock), not log times


def test_mcap_odometry_and_tf_counts_match_the_reader(real_data):
    path = real_data / "evo/nav2_turtlebot.mcap"
    counts = _reader_counts(path)
    _, streams, _ = read_bag(path)
    by = {s.name: s for s in streams}
    assert len(by["odom"].timestamps) == counts["/odom"] == 2639
    assert len(by["amcl_pose"].timestamps) == counts["/amcl_pose"] == 135
    assert by["odom"].frame == "ros" and by["odom"].values.shape == (2639, 7)
    assert any(name.startswith("tf/") for name in by)


def test_ros1_and_ros2_copies_of_one_recording_convert_equally(real_data):
    _, ros1, _ = read_bag(real_data / "evo/tf_example.bag")
    _, ros2, _ = read_bag(real_data / "evo/tf_example_ros2")
    a, b = ({s.name: s for s in x} for x in (ros1, ros2))
    assert set(a) == set(b) and "tf/odom/base_footprint" in a
    for name in a:
        np.testing.assert_array_equal(a[name].timestamps, b[name].timestamps)
        np.testing.assert_allclose(a[name].values, b[name].values)


def test_pose_stamped_counts(real_data):
    _, streams, _ = read_bag(real_data / "evo/ROS_example.bag")
    assert {s.name: len(s.timestamps) for s in streams} == {"groundtruth": 12765, "ORB-SLAM": 8362, "S-PTAM": 5439}


def test_a_topic_is_renamed_or_skipped_and_a_topic_the_bag_lacks_is_named(real_data):
    _, streams, _ = read_bag(real_data / "evo/ROS_example.bag", {"groundtruth": "truth/pose", "S-PTAM": None})
    names = {s.name for s in streams}
    assert names == {"truth/pose", "ORB-SLAM"}, names
    with pytest.raises(InvalidInput, match=r"no topic '/nope' to map. It has: ORB-SLAM, S-PTAM, groundtruth"):
        read_bag(real_data / "evo/ROS_example.bag", {"/nope": "x"})


def test_a_bag_without_type_definitions_fails_with_one_clear_error(real_data):
    # its types (test_msgs) are in no typestore and none of them is one rayform converts
    with pytest.raises(InvalidInput, match="convert_b_sqlite3: no message .* c_strings \\(test_msgs/msg/Strings\\)"):
        read_bag(real_data / "rosbag2/convert_b_sqlite3")


def test_a_bag_with_nothing_convertible_says_so(real_data):
    with pytest.raises(InvalidInput, match="no message of a type rayform converts"):
        read_bag(real_data / "rosbag2/cdr_test_mcap")


def test_listing_shows_topics_types_counts_and_rates(real_data):
    lines = describe_bag(real_data / "jsk_pr2eus/pr1040_camera_info.bag")
    assert "9.770 s, 806 messages" in lines[0]
    assert any("/kinect_head/rgb/camera_info" in line and "295" in line for line in lines)


def _write_ros2_bag(path, image_hz=10, joint_hz=50, seconds=2):
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    Image = store.types["sensor_msgs/msg/Image"]
    JointState = store.types["sensor_msgs/msg/JointState"]
    Header = store.types["std_msgs/msg/Header"]
    Time = store.types["builtin_interfaces/msg/Time"]
    frames, joints = [], []
    with Writer(path, version=8) as w:
        cam = w.add_connection("/cam/image_raw", Image.__msgtype__, typestore=store)
        js = w.add_connection("/joint_states", JointState.__msgtype__, typestore=store)
        for i in range(seconds * joint_hz):
            t = 1_000_000_000 + i * (1_000_000_000 // joint_hz)
            q = np.array([i * 0.01, -i * 0.02], np.float64)
            joints.append((t, q))
            msg = JointState(header=Header(stamp=Time(sec=t // 10**9, nanosec=t % 10**9), frame_id=""),
                             name=["b", "a"], position=q, velocity=q * 2, effort=np.array([], np.float64))
            w.write(js, t, store.serialize_cdr(msg, JointState.__msgtype__))
            if i % (joint_hz // image_hz) == 0:
                rgb = np.full((6, 8, 3), i % 255, np.uint8)
                rgb[..., 0] = 200
                frames.append((t, rgb))
                bgr = rgb[..., ::-1].copy()
                img = Image(header=Header(stamp=Time(sec=t // 10**9, nanosec=t % 10**9), frame_id="cam"),
                            height=6, width=8, encoding="bgr8", is_bigendian=0, step=24, data=bgr.reshape(-1))
                w.write(cam, t + 3_000_000, store.serialize_cdr(img, Image.__msgtype__))
    return frames, joints


def test_written_bag_with_images_and_joints_at_different_rates(tmp_path, client):
    frames, joints = _write_ros2_bag(tmp_path / "bag")
    _, streams, _ = read_bag(tmp_path / "bag", joints=["a", "b"])
    by = {s.name: s for s in streams}
    assert set(by) == {"cam/image_raw", "joint_states/position", "joint_states/velocity"}  # effort is empty
    np.testing.assert_array_equal(by["cam/image_raw"].frames, np.stack([f for _, f in frames]))  # bgr8 -> rgb
    assert by["cam/image_raw"].timestamps.tolist() == [t for t, _ in frames]  # header stamp, not log time
    np.testing.assert_array_equal(by["joint_states/position"].values, np.stack([q[::-1] for _, q in joints]))
    assert by["joint_states/position"].names == ["a", "b"]

    report = client.ingest("ros", [tmp_path / "bag"], "lab", options={"joints": ["a", "b"]}, slice_name="bag",
                    progress=False)
    ds = rayform.torch.EpisodeDataset(report.slice, obs=["cam/image_raw", "joint_states/position"],
                                      action="joint_states/position_delta", fps=10, horizon=4)
    x = ds[0]
    assert x["cam/image_raw"].shape == (3, 6, 8) and x["action"].shape == (4, 2)


def test_a_truncated_bag_fails_cleanly_and_stores_nothing(real_data, tmp_path, client):
    cut = tmp_path / "cut.bag"
    data = (real_data / "evo/ROS_example.bag").read_bytes()
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(InvalidInput, match="cut.bag"):
        client.ingest("ros", [cut], "lab", progress=False)
    assert client.segments.list() == []


def test_a_truncated_mcap_fails_cleanly(real_data, tmp_path):
    cut = tmp_path / "cut.mcap"
    data = (real_data / "evo/nav2_turtlebot.mcap").read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidInput, match="cut.mcap"):
        read_bag(cut)


def test_talker_with_qos_quirk_is_clear(real_data, tmp_path):
    shutil.copytree(real_data / "rosbag2/talker_sqlite3", tmp_path / "talker")
    with pytest.raises(InvalidInput, match="talker"):
        read_bag(tmp_path / "talker")


JOINT_STATE_MSGDEF = """std_msgs/Header header
string[] name
float64[] position
float64[] velocity
float64[] effort
================================================================================
MSG: std_msgs/Header
builtin_interfaces/Time stamp
string frame_id
================================================================================
MSG: builtin_interfaces/Time
int32 sec
uint32 nanosec
"""


def test_mcap_written_by_mcaps_ros2_writer(tmp_path):
    from mcap_ros2.writer import Writer

    path = tmp_path / "joints.mcap"
    with open(path, "wb") as f:
        w = Writer(f)
        schema = w.register_msgdef("sensor_msgs/msg/JointState", JOINT_STATE_MSGDEF)
        for i in range(30):
            t = 5_000_000_000 + i * 10_000_000
            w.write_message("/arm/joint_states", schema, {
                "header": {"stamp": {"sec": t // 10**9, "nanosec": t % 10**9}, "frame_id": ""},
                "name": ["j1", "j2", "j3"], "position": [i * 0.1, i * 0.2, -i * 0.1],
                "velocity": [], "effort": [1.0, 2.0, 3.0]}, log_time=t + 777, publish_time=t)
        w.finish()
    _, streams, _ = read_bag(path)
    by = {s.name: s for s in streams}
    assert set(by) == {"arm/joint_states/position", "arm/joint_states/effort"}
    pos = by["arm/joint_states/position"]
    assert pos.timestamps[3] == 5_030_000_000  # header stamp, not the log time
    np.testing.assert_allclose(pos.values[10], [1.0, 2.0, -1.0])
    _, log_streams, _ = read_bag(path, stamp="log")
    assert log_streams[0].timestamps[0] == 5_000_000_777


def test_ros1_bag_written_by_rosbags_with_compressed_images_and_odometry(tmp_path, client):
    from rosbags.rosbag1 import Writer
    from rosbags.typesys import Stores, get_typestore

    from rayform.codec import imagecodec

    store = get_typestore(Stores.ROS1_NOETIC)
    T = store.types
    Time, Header = T["builtin_interfaces/msg/Time"], T["std_msgs/msg/Header"]
    jpegs = [imagecodec.encode_jpeg(np.full((8, 8, 3), 20 * i, np.uint8)) for i in range(6)]
    path = tmp_path / "run.bag"
    with Writer(path) as w:
        cam = w.add_connection("/cam/compressed", "sensor_msgs/msg/CompressedImage", typestore=store)
        odom = w.add_connection("/odom", "nav_msgs/msg/Odometry", typestore=store)
        for i in range(30):
            t = 10**9 + i * 20_000_000
            h = Header(seq=i, stamp=Time(sec=t // 10**9, nanosec=t % 10**9), frame_id="odom")
            pose = T["geometry_msgs/msg/PoseWithCovariance"](
                pose=T["geometry_msgs/msg/Pose"](position=T["geometry_msgs/msg/Point"](x=i * 0.1, y=0.0, z=0.0),
                                                 orientation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0)),
                covariance=np.zeros(36))
            twist = T["geometry_msgs/msg/TwistWithCovariance"](
                twist=T["geometry_msgs/msg/Twist"](linear=T["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.0),
                                                   angular=T["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.0)),
                covariance=np.zeros(36))
            msg = T["nav_msgs/msg/Odometry"](header=h, child_frame_id="base", pose=pose, twist=twist)
            w.write(odom, t, store.serialize_ros1(msg, "nav_msgs/msg/Odometry"))
            if i % 5 == 0:
                img = T["sensor_msgs/msg/CompressedImage"](header=h, format="jpeg",
                                                           data=np.frombuffer(jpegs[i // 5], np.uint8))
                w.write(cam, t, store.serialize_ros1(img, "sensor_msgs/msg/CompressedImage"))
    _, streams, _ = read_bag(path)
    by = {s.name: s for s in streams}
    assert by["cam/compressed"].frames == jpegs
    np.testing.assert_allclose(by["odom"].values[:, 0], np.arange(30) * 0.1)
    report = client.ingest("ros", [path], "lab", slice_name="run", progress=False)
    ds = rayform.torch.EpisodeDataset(report.slice, obs=["cam/compressed", "odom"], action="odom", fps=10, horizon=2)
    x = min((ds[i] for i in range(len(ds))), key=lambda x: int(x["t_ns"]))  # the first instant: no padding
    assert x["cam/compressed"].shape == (3, 8, 8) and x["action"].shape == (2, 7)
    # 5 m/s at 10 fps
    np.testing.assert_allclose(x["action"][:, 0].numpy(), x["odom"][0].item() + np.array([0.5, 1.0]), atol=1e-5)


COMPRESSED_VIDEO = """builtin_interfaces/Time timestamp
string frame_id
uint8[] data
string format
"""


def _real_frames(real_data, count: int = 24) -> list[np.ndarray]:
    """Frames of a real camera: the LeRobot v2.1 example's (a Unitree G1's head camera), shrunk."""
    import av

    from rayform.codec import imagecodec

    path = next((real_data / "lerobot_v21_unitree_g1_subset").glob("videos/**/episode_000001.mp4"))
    with av.open(str(path)) as container:
        out = []
        for frame in container.decode(video=0):
            out.append(imagecodec.resize(frame.to_ndarray(format="rgb24"), (120, 160)))
            if len(out) == count:
                return out
    raise AssertionError("too few frames")


def _annex_b(frames: list[np.ndarray], gop: int = 8) -> list[bytes]:
    """H.264 as a camera driver sends it to Foxglove: Annex B, parameter sets in band, no B-frames."""
    import av

    ctx = av.CodecContext.create("libx264", "w")
    ctx.width, ctx.height, ctx.pix_fmt = 160, 120, "yuv420p"
    ctx.time_base = av.time_base if False else __import__("fractions").Fraction(1, 30)
    ctx.options = {"g": str(gop), "bf": "0", "preset": "ultrafast", "tune": "zerolatency"}
    out = []
    for i, f in enumerate(frames):
        vf = av.VideoFrame.from_ndarray(f, format="rgb24").reformat(format="yuv420p")
        vf.pts = i
        out += [bytes(p) for p in ctx.encode(vf)]
    out += [bytes(p) for p in ctx.encode(None)]
    return out


def test_foxglove_compressed_video_is_kept_as_a_video_stream(real_data, tmp_path, client):
    """A bag written by rosbags (MCAP storage) of foxglove_msgs/CompressedVideo messages, the
    H.264 of a real camera's frames: ingested as a VideoStream, its packets as recorded, its
    keyframes read from the bitstream, and its frames decode as the encoder's own did."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore
    from rosbags.typesys.msg import get_types_from_msg

    from rayform.codec.clip import Clip
    from rayform.codec.video import PyAVDecoder

    store = get_typestore(Stores.ROS2_HUMBLE)
    store.register(get_types_from_msg(COMPRESSED_VIDEO, "foxglove_msgs/msg/CompressedVideo"))
    Video, Time = store.types["foxglove_msgs/msg/CompressedVideo"], store.types["builtin_interfaces/msg/Time"]
    packets = _annex_b(_real_frames(real_data))
    bag = tmp_path / "camera"
    with Writer(bag, version=9, storage_plugin=StoragePlugin.MCAP) as w:
        conn = w.add_connection("/camera/h264", Video.__msgtype__, typestore=store)
        for i, data in enumerate(packets):
            t = 5_000_000_000 + i * 33_333_333
            msg = Video(timestamp=Time(sec=t // 10**9, nanosec=t % 10**9), frame_id="cam",
                        data=np.frombuffer(data, np.uint8), format="h264")
            w.write(conn, t, store.serialize_cdr(msg, Video.__msgtype__))
    report = client.ingest("ros", [bag], "lab", progress=False)
    seg = client.segments.get(report.segments[0].id)
    info = seg.streams["camera/h264"]
    assert info.is_video and info.video.codec == "h264" and info.shape == (120, 160, 3)
    assert [bytes(seg.frame_view("camera/h264", i)) for i in range(len(packets))] == packets
    keys = seg.video("camera/h264").keys
    assert keys[0] and keys.sum() == 3 and np.flatnonzero(keys).tolist() == [0, 8, 16]
    clip = Clip("h264", 160, 120, len(packets), tuple(packets), (0, 8, 16), b"")
    want = PyAVDecoder().decode(clip, range(len(packets)), None, "source")
    for i in (0, 5, 17, 23):
        assert np.array_equal(seg.frame_array("camera/h264", i), want[i])
    assert seg.timestamps("camera/h264")[1] - seg.timestamps("camera/h264")[0] == 33_333_333
