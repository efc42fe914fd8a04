// The pybind11 extension `_pstrain` under the Python package `pstrain` (python/pstrain/): clusters
// (Session), dynamic tables and variables taking and returning NumPy arrays, futures, checkpoints,
// the Predictor and export. Python's view of it is documented in docs/python.md; the package's
// modules wrap it.
//
// Arrays: ids of any integer dtype (int64 is used where it lies; others are converted once);
// values float32 only (another dtype is an error, not a silent copy). Lookups write straight into
// the array they return. Every call that reaches the ps releases the GIL. Errors are
// pstrain.Error, whose `code` is the C++ status code's name ("NOT_FOUND") and `message` the C++
// message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>


#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "python/session.h"
#include "serving/export.h"
#include "serving/predictor.h"

namespace py = pybind11;

namespace pstrain {
namespace {

// A failed status on its way to Python (translated into pstrain.Error).
struct StatusError {
  absl::Status status;
};

PyObject* error_class = nullptr;  // pstrain.Error, made when the module is imported

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw StatusError{status};
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  ThrowIfError(value.status());
  return *std::move(value);
}

[[noreturn]] void ThrowInvalid(const std::string& message) {
  throw StatusError{absl::InvalidArgumentError(message)};
}

std::string DTypeText(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

std::string ShapeText(const py::array& a) {
  std::vector<std::string> dims;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) dims.push_back(std::to_string(a.shape(i)));
  return absl::StrCat("(", absl::StrJoin(dims, ", "), a.ndim() == 1 ? ",)" : ")");
}

using Ids = py::array_t<int64_t, py::array::c_style>;
using Floats = py::array_t<float, py::array::c_style>;

// `obj` (an array, a torch tensor on the CPU, a list) as C-contiguous int64 ids: the same memory
// when it already is, else one converted copy. Errors: kInvalidArgument for values that are not
// integers.
Ids IdsFrom(const py::handle& obj, const char* what) {
  py::array a = py::array::ensure(obj);
  if (!a) ThrowInvalid(absl::StrCat(what, " must be an array of integers"));
  const char kind = a.dtype().kind();
  if (a.size() > 0 && kind != 'i' && kind != 'u') {
    ThrowInvalid(absl::StrCat(what, " must be integers, got dtype ", DTypeText(a)));
  }
  Ids ids = Ids::ensure(py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a));
  if (!ids) ThrowInvalid(absl::StrCat(what, " can't be read as int64"));
  return ids;
}

// `obj` as C-contiguous float32 values shaped ids.shape + row_shape. Errors: kInvalidArgument
// naming the dtype or the shapes.
Floats ValuesFor(const py::handle& obj, const Ids& ids, const std::vector<int64_t>& row_shape,
                 const char* what) {
  py::array a = py::array::ensure(obj);
  if (!a) ThrowInvalid(absl::StrCat(what, " must be an array of float32"));
  if (a.dtype().kind() != 'f' || a.dtype().itemsize() != 4) {
    ThrowInvalid(absl::StrCat(what, " must be float32, got dtype ", DTypeText(a)));
  }
  const py::ssize_t rank = ids.ndim() + static_cast<py::ssize_t>(row_shape.size());
  bool shape_ok = a.ndim() == rank;
  for (py::ssize_t i = 0; shape_ok && i < rank; ++i) {
    shape_ok = a.shape(i) == (i < ids.ndim() ? ids.shape(i) : row_shape[i - ids.ndim()]);
  }
  if (!shape_ok) {
    ThrowInvalid(absl::StrCat(what, " have shape ", ShapeText(a), ", expected ids' ",
                              ShapeText(ids), " + (", absl::StrJoin(row_shape, ", "),
                              row_shape.size() == 1 ? ",)" : ")"));
  }
  return Floats::ensure(a);  // a copy only when not C-contiguous
}

// Waits for a call without holding the GIL.
absl::Status WaitReleased(const PendingCall& call, absl::Duration timeout) {
  py::gil_scoped_release release;
  return call.Wait(timeout);
}

// A call running on the session's threads: its result once done, and the arrays it reads or
// writes, kept alive until it is.
class Future {
 public:
  Future(std::shared_ptr<PendingCall> call, py::object result, std::vector<py::object> keep)
      : call_(std::move(call)), result_(std::move(result)), keep_(std::move(keep)) {}
  // Moved (into the Python object), never copied: a copy's destructor would wait for the call.
  Future(Future&&) = default;
  Future& operator=(Future&&) = default;
  Future(const Future&) = delete;
  Future& operator=(const Future&) = delete;
  // The arrays must outlive the call: a future dropped early waits for it.
  ~Future() {
    if (call_ != nullptr && !call_->done()) {
      WaitReleased(*call_, absl::InfiniteDuration()).IgnoreError();
    }
  }
  bool done() const { return call_->done(); }
  py::object Result(std::optional<double> timeout_seconds) {
    const absl::Duration timeout =
        timeout_seconds ? absl::Seconds(*timeout_seconds) : absl::InfiniteDuration();
    ThrowIfError(WaitReleased(*call_, timeout));
    return result_;
  }

 private:
  std::shared_ptr<PendingCall> call_;
  py::object result_;
  std::vector<py::object> keep_;
};

// The handles Python holds: each keeps its session (and so its ps clients) alive.
struct Table {
  std::shared_ptr<Session> session;
  DynamicTable table;
};

struct Variable {
  std::shared_ptr<Session> session;
  ShardedVariable variable;
  int64_t width() const { return variable.width(); }
};

// `obj` as a whole variable's `what` (values, gradients): int64 (`int64`) or float32, as many
// elements as the variable holds, C-contiguous (a copy only when it isn't). Errors:
// kInvalidArgument naming the dtype or the shape.
py::array WholeVariable(const Variable& v, const py::handle& obj, const char* what, bool int64) {
  py::array a = py::array::ensure(obj);
  if (!a || a.dtype().kind() != (int64 ? 'i' : 'f') || a.dtype().itemsize() != (int64 ? 8 : 4)) {
    ThrowInvalid(absl::StrCat(what, " must be ", int64 ? "int64" : "float32",
                              a ? absl::StrCat(", got dtype ", DTypeText(a)) : ""));
  }
  if (a.nbytes() != v.variable.num_rows() * v.variable.row_bytes()) {
    ThrowInvalid(absl::StrCat(what, " have shape ", ShapeText(a), ", expected the variable's ",
                              absl::StrJoin(v.variable.shape(), ", ")));
  }
  return py::array::ensure(a, py::array::c_style);
}

absl::string_view BytesOf(const py::array& a) {
  return absl::string_view(static_cast<const char*>(a.data()), a.nbytes());
}

LookupMode ModeOf(bool train) { return train ? LookupMode::kTrain : LookupMode::kEval; }

// The output array of a lookup of `ids` rows of `width` floats (trailing dims `row_shape`).
Floats OutputFor(const Ids& ids, const std::vector<int64_t>& row_shape) {
  std::vector<py::ssize_t> shape(ids.shape(), ids.shape() + ids.ndim());
  shape.insert(shape.end(), row_shape.begin(), row_shape.end());
  return Floats(shape);
}

// Runs `fn` now (GIL released) or, when `async`, on the session's threads as a Future.
py::object Call(const std::shared_ptr<Session>& session, bool async, py::object result,
                std::vector<py::object> keep, std::function<absl::Status()> fn) {
  if (!async) {
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = fn();
    }
    ThrowIfError(status);
    return result;
  }
  std::shared_ptr<PendingCall> call = session->Run(std::move(fn));
  return py::cast(Future(std::move(call), std::move(result), std::move(keep)));
}

py::object TableLookup(const Table& t, const py::handle& ids_obj, bool train, int64_t step,
                       bool async) {
  Ids ids = IdsFrom(ids_obj, "ids");
  Floats out = OutputFor(ids, {t.table.dim()});
  const int64_t* keys = ids.data();
  const size_t n = static_cast<size_t>(ids.size());
  float* rows = out.mutable_data();
  DynamicTable table = t.table;
  return Call(t.session, async, out, {ids, out}, [=] {
    return table.Lookup(absl::MakeConstSpan(keys, n), rows, ModeOf(train), step);
  });
}

py::object TableApply(const Table& t, const py::handle& ids_obj, const py::handle& grads_obj,
                      int64_t step, bool async) {
  Ids ids = IdsFrom(ids_obj, "ids");
  Floats grads = ValuesFor(grads_obj, ids, {t.table.dim()}, "gradients");
  const int64_t* keys = ids.data();
  const size_t n = static_cast<size_t>(ids.size());
  const float* g = grads.data();
  DynamicTable table = t.table;
  return Call(t.session, async, py::none(), {ids, grads}, [=] {
    return table.ApplyGradients(absl::MakeConstSpan(keys, n), g, step);
  });
}

// A flat message's scalar fields as a dict (int64 as int, enums by name): the counters' form.
py::dict ScalarFields(const google::protobuf::Message& message) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = message.GetReflection();
  const google::protobuf::Descriptor* d = message.GetDescriptor();
  py::dict out;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->is_repeated()) continue;
    const char* name = f->name().c_str();
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT64: out[name] = r->GetInt64(message, f); break;
      case FieldDescriptor::CPPTYPE_INT32: out[name] = r->GetInt32(message, f); break;
      case FieldDescriptor::CPPTYPE_BOOL: out[name] = r->GetBool(message, f); break;
      case FieldDescriptor::CPPTYPE_DOUBLE: out[name] = r->GetDouble(message, f); break;
      case FieldDescriptor::CPPTYPE_STRING: out[name] = r->GetString(message, f); break;
      case FieldDescriptor::CPPTYPE_ENUM: out[name] = r->GetEnum(message, f)->name(); break;
      default: break;
    }
  }
  return out;
}

// Times `iterations` lookups (op "lookup") or gradient pushes (op "apply") from C++, one after
// another, as a C++ client's loop would: iteration i sends row i % B of `batches` (B, n). The
// native figure a Python loop's is measured against (bench/python_client_bench.py). Returns
// seconds.
double TimeNativeLoop(const Table& t, const py::handle& batches_obj, const std::string& op,
                      int iterations) {
  Ids batches = IdsFrom(batches_obj, "batches");
  if (batches.ndim() != 2 || batches.shape(0) < 1) ThrowInvalid("batches must be (B, n), B >= 1");
  if (op != "lookup" && op != "apply") ThrowInvalid("op must be \"lookup\" or \"apply\"");
  const size_t n = static_cast<size_t>(batches.shape(1));
  const int64_t count = batches.shape(0);
  std::vector<float> values(n * t.table.dim(), 0.001f);
  absl::Status status;
  double seconds = 0;
  {
    py::gil_scoped_release release;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations && status.ok(); ++i) {
      const auto ids = absl::MakeConstSpan(batches.data() + (i % count) * n, n);
      status = op == "lookup" ? t.table.Lookup(ids, values.data(), LookupMode::kTrain)
                              : t.table.ApplyGradients(ids, values.data());
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  ThrowIfError(status);
  return seconds;
}

TaskRef TaskOf(const std::string& type, int index) { return TaskRef{type, index}; }

void DefineSession(py::module_& m) {
  py::class_<Session, std::shared_ptr<Session>>(m, "Session")
      .def_static(
          "in_process",
          [](int workers, int ps, int64_t ps_memory_budget, const std::string& ps_disk_dir) {
            InProcessClusterOptions options;
            options.num_workers = workers;
            options.num_ps = ps;
            options.ps_memory_budget_bytes = ps_memory_budget;
            options.ps_disk_dir = ps_disk_dir;
            py::gil_scoped_release release;
            return std::shared_ptr<Session>(ValueOrThrow(Session::InProcess(options)));
          },
          py::arg("workers"), py::arg("ps"), py::arg("ps_memory_budget") = 0,
          py::arg("ps_disk_dir") = "")
      .def_static(
          "connect",
          [](const std::string& spec) {
            py::gil_scoped_release release;
            return std::shared_ptr<Session>(ValueOrThrow(Session::Connect(spec)));
          },
          py::arg("spec"))
      .def_property_readonly("spec_json", [](const Session& s) { return s.spec().ToJson(); })
      .def_property_readonly("num_ps", [](const Session& s) { return s.spec().num_ps(); })
      .def_property_readonly("num_workers", [](const Session& s) { return s.spec().num_workers(); })
      .def_property_readonly("is_in_process", &Session::in_process)
      .def(
          "create_table",
          [](std::shared_ptr<Session> s, const std::string& name, int64_t dim, int num_shards,
             const std::string& initializer, const std::string& optimizer,
             const std::string& options) {
            SessionTableOptions o{name, dim, num_shards, initializer, optimizer, options};
            py::gil_scoped_release release;
            return Table{s, ValueOrThrow(s->CreateTable(o))};
          },
          py::arg("name"), py::arg("dim"), py::arg("num_shards"), py::arg("initializer"),
          py::arg("optimizer"), py::arg("options"))
      .def(
          "table",
          [](std::shared_ptr<Session> s, const std::string& name) {
            py::gil_scoped_release release;
            return Table{s, ValueOrThrow(s->FindTable(name))};
          },
          py::arg("name"))
      .def(
          "create_variable",
          [](std::shared_ptr<Session> s, const std::string& name, std::vector<int64_t> shape,
             const std::string& dtype, const std::string& partitioner, int num_shards,
             int64_t min_shard_bytes, int64_t max_shard_bytes, int max_shards,
             const std::string& initializer, const std::string& optimizer) {
            SessionVariableOptions o;
            o.name = name;
            o.shape = std::move(shape);
            o.dtype = dtype;
            o.partitioner = partitioner;
            o.num_shards = num_shards;
            o.min_shard_bytes = min_shard_bytes;
            o.max_shard_bytes = max_shard_bytes;
            o.max_shards = max_shards;
            o.initializer_json = initializer;
            o.optimizer_json = optimizer;
            py::gil_scoped_release release;
            return Variable{s, ValueOrThrow(s->CreateVariable(o))};
          },
          py::arg("name"), py::arg("shape"), py::arg("dtype"), py::arg("partitioner"),
          py::arg("num_shards"), py::arg("min_shard_bytes"), py::arg("max_shard_bytes"),
          py::arg("max_shards"), py::arg("initializer"), py::arg("optimizer"))
      .def(
          "variable",
          [](std::shared_ptr<Session> s, const std::string& name) {
            py::gil_scoped_release release;
            return Variable{s, ValueOrThrow(s->FindVariable(name))};
          },
          py::arg("name"))
      .def(
          "save",
          [](Session& s, const std::string& dir, int64_t step, bool incremental, int keep) {
            py::gil_scoped_release release;
            return ValueOrThrow(s.Save(dir, step, incremental, keep));
          },
          py::arg("dir"), py::arg("step"), py::arg("incremental") = false, py::arg("keep") = 3)
      .def(
          "restore",
          [](Session& s, const std::string& path) {
            RestoredCheckpoint restored;
            {
              py::gil_scoped_release release;
              restored = ValueOrThrow(s.Restore(path));
            }
            py::dict out;
            out["path"] = restored.path;
            out["step"] = restored.step;
            out["bytes"] = restored.bytes;
            return out;
          },
          py::arg("path"))
      .def(
          "stop_task",
          [](Session& s, const std::string& type, int index) {
            if (!s.in_process()) ThrowInvalid("stop_task: the cluster is not in this process");
            py::gil_scoped_release release;
            ThrowIfError(s.cluster()->StopTask(TaskOf(type, index)));
          },
          py::arg("type"), py::arg("index"))
      .def(
          "start_task",
          [](Session& s, const std::string& type, int index) {
            if (!s.in_process()) ThrowInvalid("start_task: the cluster is not in this process");
            py::gil_scoped_release release;
            ThrowIfError(s.cluster()->StartTask(TaskOf(type, index)));
          },
          py::arg("type"), py::arg("index"))
      .def("shutdown", [](Session& s) {
        py::gil_scoped_release release;
        s.Shutdown();
      });
}

void DefineTable(py::module_& m) {
  py::class_<Table>(m, "Table")
      .def_property_readonly("name", [](const Table& t) { return t.table.name(); })
      .def_property_readonly("dim", [](const Table& t) { return t.table.dim(); })
      .def_property_readonly("num_shards", [](const Table& t) { return t.table.num_shards(); })
      .def(
          "lookup",
          [](const Table& t, py::handle ids, bool train, int64_t step, bool async) {
            return TableLookup(t, ids, train, step, async);
          },
          py::arg("ids"), py::arg("train") = true, py::arg("step") = 0, py::arg("async_") = false)
      .def(
          "apply_gradients",
          [](const Table& t, py::handle ids, py::handle grads, int64_t step, bool async) {
            return TableApply(t, ids, grads, step, async);
          },
          py::arg("ids"), py::arg("grads"), py::arg("step") = 0, py::arg("async_") = false)
      .def(
          "assign",
          [](const Table& t, py::handle ids_obj, py::handle values_obj) {
            Ids ids = IdsFrom(ids_obj, "ids");
            Floats values = ValuesFor(values_obj, ids, {t.table.dim()}, "values");
            py::gil_scoped_release release;
            ThrowIfError(t.table.Assign(absl::MakeConstSpan(ids.data(), ids.size()),
                                        values.data()));
          },
          py::arg("ids"), py::arg("values"))
      .def(
          "erase",
          [](const Table& t, py::handle ids_obj) {
            Ids ids = IdsFrom(ids_obj, "ids");
            py::gil_scoped_release release;
            ThrowIfError(t.table.Erase(absl::MakeConstSpan(ids.data(), ids.size())));
          },
          py::arg("ids"))
      .def("size",
           [](const Table& t) {
             py::gil_scoped_release release;
             return ValueOrThrow(t.table.Size());
           })
      .def("stats",
           [](const Table& t) {
             std::vector<DynamicShardStats> stats;
             {
               py::gil_scoped_release release;
               stats = ValueOrThrow(t.table.Stats());
             }
             py::list out;
             for (const DynamicShardStats& s : stats) out.append(ScalarFields(s));
             return out;
           })
      .def("_time_native_loop", &TimeNativeLoop, py::arg("batches"), py::arg("op"),
           py::arg("iterations"));
}

void DefineVariable(py::module_& m) {
  py::class_<Variable>(m, "Variable")
      .def_property_readonly("name", [](const Variable& v) { return v.variable.name(); })
      .def_property_readonly("shape", [](const Variable& v) { return v.variable.shape(); })
      .def_property_readonly("num_shards",
                             [](const Variable& v) { return v.variable.shards().size(); })
      .def(
          "lookup",
          [](const Variable& v, py::handle ids_obj, bool async) {
            if (v.variable.dtype() != DT_FLOAT32) ThrowInvalid("lookup: the variable is not float32");
            Ids ids = IdsFrom(ids_obj, "ids");
            const std::vector<int64_t>& shape = v.variable.shape();
            Floats out = OutputFor(ids, std::vector<int64_t>(shape.begin() + 1, shape.end()));
            const int64_t* p = ids.data();
            const size_t n = ids.size();
            float* o = out.mutable_data();
            ShardedVariable var = v.variable;
            return Call(v.session, async, out, {ids, out},
                        [=] { return var.Lookup(absl::MakeConstSpan(p, n), o); });
          },
          py::arg("ids"), py::arg("async_") = false)
      .def(
          "apply_gradients",
          [](const Variable& v, py::handle ids_obj, py::handle grads_obj, bool async) {
            Ids ids = IdsFrom(ids_obj, "ids");
            const std::vector<int64_t>& shape = v.variable.shape();
            Floats grads = ValuesFor(grads_obj, ids,
                                     std::vector<int64_t>(shape.begin() + 1, shape.end()),
                                     "gradients");
            const int64_t* p = ids.data();
            const size_t n = ids.size();
            const float* g = grads.data();
            ShardedVariable var = v.variable;
            return Call(v.session, async, py::none(), {ids, grads},
                        [=] { return var.ApplyGradients(absl::MakeConstSpan(p, n), g); });
          },
          py::arg("ids"), py::arg("grads"), py::arg("async_") = false)
      .def("read",
           [](const Variable& v) {
             std::string bytes;
             {
               py::gil_scoped_release release;
               bytes = ValueOrThrow(v.variable.ReadAll());
             }
             const std::vector<int64_t>& shape = v.variable.shape();
             py::array out = v.variable.dtype() == DT_INT64
                                 ? py::array(py::dtype::of<int64_t>(), shape)
                                 : py::array(py::dtype::of<float>(), shape);
             if (static_cast<size_t>(out.nbytes()) != bytes.size()) {
               ThrowIfError(absl::InternalError(absl::StrCat(
                   "read ", bytes.size(), " bytes of variable \"", v.variable.name(),
                   "\", expected ", out.nbytes())));
             }
             std::memcpy(out.mutable_data(), bytes.data(), bytes.size());
             return out;
           })
      .def(
          "assign",
          [](const Variable& v, py::handle values_obj) {
            const bool int64 = v.variable.dtype() == DT_INT64;
            const py::array values = WholeVariable(v, values_obj, "values", int64);
            py::gil_scoped_release release;
            ThrowIfError(v.variable.AssignAll(BytesOf(values)));
          },
          py::arg("values"))
      .def(
          "apply_dense_gradients",
          [](const Variable& v, py::handle grads_obj) {
            const py::array grads = WholeVariable(v, grads_obj, "gradients", /*int64=*/false);
            py::gil_scoped_release release;
            ThrowIfError(v.variable.ApplyDenseGradients(BytesOf(grads)));
          },
          py::arg("grads"));
}

void DefineServing(py::module_& m) {
  py::class_<Predictor, std::shared_ptr<Predictor>>(m, "Predictor")
      .def(py::init([](const std::string& export_dir, int64_t cache_bytes) {
             PredictorOptions options;
             if (cache_bytes != 0) options.store.cache_bytes = cache_bytes;
             py::gil_scoped_release release;
             return std::shared_ptr<Predictor>(ValueOrThrow(Predictor::Load(export_dir, options)));
           }),
           py::arg("export_dir"), py::arg("cache_bytes") = 0)
      .def_property_readonly("model", &Predictor::model)
      .def_property_readonly("columns", &Predictor::columns)
      .def_property_readonly("outputs", &Predictor::outputs)
      .def_property_readonly("version", [](const Predictor& p) { return p.manifest().step; })
      .def(
          "predict_rows",
          [](const Predictor& p, std::vector<std::string> columns,
             std::vector<std::vector<std::string>> rows) {
            RawExamples examples{std::move(columns), std::move(rows)};
            std::vector<float> out;
            {
              py::gil_scoped_release release;
              ThrowIfError(p.Predict(examples, &out));
            }
            const py::ssize_t width = static_cast<py::ssize_t>(p.outputs().size());
            Floats result({static_cast<py::ssize_t>(examples.rows.size()), width});
            std::memcpy(result.mutable_data(), out.data(), out.size() * sizeof(float));
            return result;
          },
          py::arg("columns"), py::arg("rows"));

  m.def(
      "export_model",
      [](const std::string& checkpoint, const std::string& out, bool overwrite, int64_t min_count,
         int64_t top_k, const std::string& table_format) {
        ExportOptions options;
        options.checkpoint = checkpoint;
        options.out = out;
        options.overwrite = overwrite;
        options.min_count = min_count;
        options.top_k = top_k;
        options.table_format = table_format;
        ExportResult result;
        {
          py::gil_scoped_release release;
          result = ValueOrThrow(ExportModel(options));
        }
        py::dict d;
        d["checkpoint"] = result.checkpoint;
        d["model"] = result.manifest.model;
        d["step"] = result.manifest.step;
        d["bytes"] = result.bytes;
        d["seconds"] = result.seconds;
        return d;
      },
      py::arg("checkpoint"), py::arg("out"), py::arg("overwrite") = false,
      py::arg("min_count") = 0, py::arg("top_k") = 0, py::arg("table_format") = "");
}

}  // namespace
}  // namespace pstrain

PYBIND11_MODULE(_pstrain, m) {
  using namespace pstrain;  // NOLINT: the bindings' one scope
  // Python programs get warnings and errors from the C++ core, not its progress notes (servers
  // started, checkpoints saved); PSTRAIN_LOG_LEVEL=info (or set_log_level) brings them back.
  SetMinLogLevel(LogLevel::kWarning);
  SetMinLogLevelFromEnv();
  m.def(
      "set_log_level",
      [](const std::string& level) {
        if (level == "debug") return SetMinLogLevel(LogLevel::kDebug);
        if (level == "info") return SetMinLogLevel(LogLevel::kInfo);
        if (level == "warning") return SetMinLogLevel(LogLevel::kWarning);
        if (level == "error") return SetMinLogLevel(LogLevel::kError);
        ThrowInvalid(absl::StrCat("log level \"", level, "\" is not debug, info, warning or error"));
      },
      py::arg("level"));
  m.doc() = "The C++ core of the pstrain package (see docs/python.md); use `import pstrain`.";
  error_class = PyErr_NewExceptionWithDoc(
      "pstrain.Error",
      "An error from the C++ core: `code` is the status code's name (\"NOT_FOUND\", "
      "\"UNAVAILABLE\", ...), `message` the C++ message.",
      PyExc_RuntimeError, nullptr);
  m.add_object("Error", py::handle(error_class));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      const std::string code = absl::StatusCodeToString(e.status.code());
      std::string name;
      for (char c : code) name += c == ' ' ? '_' : static_cast<char>(std::toupper(c));
      const std::string message(e.status.message());
      py::object exc = py::reinterpret_borrow<py::object>(error_class)(
          absl::StrCat(name, ": ", message));
      exc.attr("code") = name;
      exc.attr("message") = message;
      PyErr_SetObject(error_class, exc.ptr());
    }
  });
  py::class_<Future>(m, "Future")
      .def("done", &Future::done)
      .def("result", &Future::Result, py::arg("timeout") = py::none());
  DefineSession(m);
  DefineTable(m);
  DefineVariable(m);
  DefineServing(m);
}
