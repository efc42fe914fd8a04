"""The Predictor from Python: a model exported by pstrain.export() (or //serving:export), with
the same parsing and feature transforms as training, and no cluster (serving/predictor.h)."""

import math

import numpy as np

from pstrain import _pstrain
from pstrain._errors import error


def _text(value):
    """A cell as the C++ reads it: None and NaN are missing (""), numbers in full precision."""
    if value is None:
        return ""
    if isinstance(value, (float, np.floating)):
        return "" if math.isnan(value) else repr(float(value))
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


class Predictor:
    """predict() takes a dict of columns (name -> a list or array, all of one length) or a pandas
    DataFrame, and returns float32 predictions shaped (rows, len(outputs))."""

    def __init__(self, export_dir, cache_bytes=0):
        self._p = _pstrain.Predictor(str(export_dir), int(cache_bytes))

    @property
    def model(self):
        return self._p.model

    @property
    def columns(self):
        """The columns an example needs."""
        return list(self._p.columns)

    @property
    def outputs(self):
        return list(self._p.outputs)

    def predict(self, data):
        if hasattr(data, "to_dict") and hasattr(data, "columns"):  # a pandas DataFrame
            data = {str(c): data[c].tolist() for c in data.columns}
        if not isinstance(data, dict):
            raise TypeError(f"predict takes a dict of columns or a DataFrame, got "
                            f"{type(data).__name__}")
        columns = list(data)
        values = [list(data[c]) for c in columns]
        lengths = {len(v) for v in values}
        if len(lengths) > 1:
            sizes = ", ".join(f"{c}: {len(v)}" for c, v in zip(columns, values))
            raise error("INVALID_ARGUMENT", f"columns of different lengths ({sizes})")
        rows = [[_text(v[i]) for v in values] for i in range(lengths.pop() if lengths else 0)]
        return self._p.predict_rows(columns, rows)

    def __repr__(self):
        return f"pstrain.Predictor({self.model!r}, outputs={self.outputs})"
