// strata demo: a short tour of the SDK's values, the main job until the host lands.
#include <QCommandLineParser>
#include <QTextStream>

#include <sstream>

#include "commands/commands.h"
#include "strata/strata.h"

namespace strata::host {

namespace {

Tensor muladdReference(const Tensor& a, const Tensor& b, double c) {
  const Tensor x = a.to(kFloat32).contiguous();
  const Tensor y = b.to(kFloat32).contiguous();
  Tensor out = empty(x.sizes(), kFloat32);
  const float* px = x.data_ptr<float>();
  const float* py = y.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) po[i] = px[i] * py[i] + static_cast<float>(c);
  return out;
}

}  // namespace

int runDemoCommand(const QStringList& args) {
  QCommandLineParser parser;
  parser.setApplicationDescription("Show the SDK's values: tensors, DLPack, IValues and schemas.");
  parser.addHelpOption();
  QTextStream out(stdout);
  if (int rc = parseOrExit(parser, args); rc >= 0) return rc;
  if (!parser.positionalArguments().isEmpty()) {
    QTextStream(stderr) << args.first() << ": takes no arguments\n";
    return kExitUsage;
  }
  auto line = [&out](const std::string& s) { out << QString::fromStdString(s) << "\n"; };

  line("== Tensors");
  const Tensor a = arange(6, kFloat32).view({2, 3});
  line("a = arange(6).view({2, 3})      " + a.str());
  line("a.transpose(0, 1) (a view)      " + a.transpose(0, 1).str());
  line("  shares storage with a: " + std::string(a.transpose(0, 1).is_alias_of(a) ? "yes" : "no") +
       ", contiguous: " + (a.transpose(0, 1).is_contiguous() ? "yes" : "no"));
  line("a.to(bfloat16)                  " + a.to(kBFloat16).str());
  line("full({2}, 1/3, float16)         " + full({2}, 1.0 / 3.0, kFloat16).str());
  const Tensor m = empty({1024, 1024}, TensorOptions(kMeta));
  line("empty({1024, 1024}, meta)       " + m.str());
  try {
    (void)m.data_ptr();
  } catch (const Error& e) {
    line("  m.data_ptr() -> " + std::string(e.what()));
  }
  Tensor g = ones({3}).set_requires_grad(true);
  line("ones(3).requires_grad keys      " + g.key_set().str());
  line("muladd(ones(3), ones(3), 2.0)   " + muladdReference(ones({3}), ones({3}), 2.0).str());
  line(std::string("CUDA: ") + (cuda::is_available() ? "available, " + std::to_string(cuda::device_count()) + " device(s)"
                                                      : "not available (" + cuda::unavailable_reason() + ")"));

  line("\n== DLPack (zero copy)");
  DLManagedTensor* exported = toDLPack(a);
  const Tensor back = fromDLPack(exported);
  line("fromDLPack(toDLPack(a)) shares a's memory: " +
       std::string(back.data_ptr() == a.data_ptr() ? "yes" : "no") + ", equal: " + (back.equal(a) ? "yes" : "no"));

  line("\n== IValues (boxed calling convention)");
  Stack stack;
  push(stack, a, 2.0, std::vector<int64_t>{1, 2}, std::string("mean"), kBFloat16);
  for (const IValue& v : stack) line(std::string("  ") + v.typeName() + ": " + v.repr());
  try {
    (void)stack[1].toTensor();
  } catch (const Error& e) {
    line("  stack[1].toTensor() -> " + std::string(e.what()));
  }

  line("\n== Schemas");
  for (const char* s : {"extension_cpp::mymuladd(Tensor a, Tensor b, float c) -> Tensor",
                        "aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)",
                        "aten::layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, "
                        "Tensor? bias=None, float eps=1e-05, bool cudnn_enable=True) -> Tensor",
                        "aten::contiguous(Tensor(a) self, *, MemoryFormat memory_format=contiguous_format) -> Tensor(a)"}) {
    line("  " + parseSchema(s).str());
  }
  line("infer_schema<Tensor(const Tensor&, const Tensor&, double)>: " +
       infer_schema<Tensor(const Tensor&, const Tensor&, double)>("mylib::muladd").str());
  try {
    parseSchema("mylib::bad(Tensor x, int y=1, float z) -> Tensor");
  } catch (const SchemaError& e) {
    line(std::string("  ") + e.what());
  }
  return kExitOk;
}

}  // namespace strata::host
