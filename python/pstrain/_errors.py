"""pstrain.Error raised from the Python side, in the form the C++ side raises it
(python/module.cc's translator): `code` the status code's name, `message` the text, and
str(e) == f"{code}: {message}"."""

from pstrain import _pstrain


def error(code, message):
    e = _pstrain.Error(f"{code}: {message}")
    e.code = code
    e.message = message
    return e
