"""The shared argparse value parsers (cvbench.cli.args)."""

import argparse
import doctest

import pytest

from cvbench.cli import args


@pytest.mark.parametrize(
    "parser, good, bad",
    [
        (args.positive_int, [("1", 1), ("64", 64)], ["0", "-3", "1.5", "x"]),
        (args.non_negative_int, [("0", 0), ("7", 7)], ["-1", "2.0", ""]),
        (args.non_negative_float, [("0", 0.0), ("0.25", 0.25)], ["-0.1", "nan", "inf", "a"]),
        (args.positive_int_list, [("1,8,64", (1, 8, 64)), ("none", ()), ("", ())], ["1,0"]),
        (args.name_list, [("a, b", ("a", "b"))], ["", " , "]),
        (args.float_list, [("30,60.5", (30.0, 60.5))], ["30,x"]),
    ],
)
def test_values_and_errors_naming_the_value(parser, good, bad):
    for text, value in good:
        assert parser(text) == value
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError, match="expected"):
            parser(text)


def test_a_bad_value_is_a_usage_error():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=args.positive_int)
    with pytest.raises(SystemExit) as exit_info:
        p.parse_args(["--steps", "0"])
    assert exit_info.value.code == 2


def test_docstring_examples():
    result = doctest.testmod(args)
    assert result.attempted > 0 and result.failed == 0
