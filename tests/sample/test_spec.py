"""The sample spec: checked when made, its fields in their final types, made from the datasets'
keywords (``SampleSpec.of``) or given whole, never both."""

from __future__ import annotations

import numpy as np
import pytest

import rayform
from rayform.errors import InvalidInput
from rayform.sample.spec import Action, SampleSpec


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"obs": ()}, "obs .*name one stream"),
        ({"obs": ["cam0/rgb", 3]}, "obs .*name one stream"),
        ({"obs": "cam0/rgb", "action": 5}, "action 5: a stream name"),
        ({"obs": "cam0/rgb", "horizon": 0}, "horizon 0: a whole number"),
        ({"obs": "cam0/rgb", "horizon": 2.5}, "horizon 2.5: a whole number"),
        ({"obs": "cam0/rgb", "fps": 0}, "fps 0: must be a number"),
        ({"obs": "cam0/rgb", "frame": "ned"}, "frame 'ned'"),
    ],
)
def test_a_sample_spec_is_checked_when_made(kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        SampleSpec.of(**kwargs)


def test_a_sample_spec_takes_one_stream_name_or_many():
    assert SampleSpec.of("cam0/rgb").obs == ("cam0/rgb",)
    spec = SampleSpec.of(["cam0/rgb", "joints/position"], "joints/position", horizon=np.int64(4))
    assert spec.horizon == 4 and spec.action == rayform.torch.Action(("joints/position",), 4)
    assert SampleSpec.of("cam0/rgb").horizon == 0  # no action, no horizon


def test_a_spec_is_given_whole_or_as_keywords_never_both():
    spec = SampleSpec.of("cam0/rgb", "joints/position_delta", fps=10, horizon=4, normalize={"action": "min_max"})
    assert SampleSpec.given(spec, {}) is spec and SampleSpec.given(None, {"obs": "cam0/rgb"}).obs == ("cam0/rgb",)
    with pytest.raises(InvalidInput, match="a SampleSpec and fps= beside it"):
        SampleSpec.given(spec, {"fps": 15})
    with pytest.raises(InvalidInput, match="name what each sample holds"):
        SampleSpec.given(None, {})
    with pytest.raises(InvalidInput, match="horizn=: not a sample parameter"):
        SampleSpec.of("cam0/rgb", horizn=4)


def test_fields_are_in_their_final_types_and_checked_not_converted():
    spec = SampleSpec.of(["cam0/rgb", "joints/position"], ["joints/position_delta", "ee/pose"], fps=30, horizon=8,
                         rotation="rot6d", history={"cam0/rgb": 2}, resize=[112, 112], pack=None)
    assert spec == SampleSpec(("cam0/rgb", "joints/position"), Action(("joints/position_delta", "ee/pose"), 8, "rot6d"),
                              30.0, None, (("cam0/rgb", (1, 0)),), (112, 112))
    assert hash(spec) == hash(SampleSpec.of(["cam0/rgb", "joints/position"], ["joints/position_delta", "ee/pose"],
                                            fps=30, horizon=8, rotation="rot6d", history={"cam0/rgb": 2},
                                            resize=(112, 112)))  # frozen, comparable, hashable
    with pytest.raises(InvalidInput, match="obs"):
        SampleSpec(["cam0/rgb"])  # type: ignore[arg-type]  # a list: SampleSpec.of converts, SampleSpec does not
    with pytest.raises(InvalidInput, match="fps 15: a float"):
        SampleSpec(("cam0/rgb",), fps=15)  # type: ignore[arg-type]
