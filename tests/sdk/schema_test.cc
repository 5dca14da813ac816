// The schema language: parsing, canonical printing, structure, errors.
#include "strata/schema.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <regex>

namespace strata {
namespace {

using ::testing::HasSubstr;

// Parses, prints, and checks that printing is a fixed point of parsing.
std::string canonical(const std::string& s) {
  const FunctionSchema schema = parseSchema(s);
  const std::string printed = schema.str();
  const FunctionSchema again = parseSchema(printed);
  EXPECT_EQ(again, schema) << "reparsing changed the schema: " << printed;
  EXPECT_EQ(again.str(), printed) << "printing is not idempotent for " << s;
  return printed;
}

TEST(SchemaTest, TheIssueExamplesRoundTripByteForByte) {
  for (const char* s : {
           "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
           "aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)",
           "aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
           "aten::as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor(a)",
           "aten::_unpack_dual(Tensor(a) dual, int level) -> (Tensor(a) primal, Tensor tangent)",
           "aten::avg_pool1d(Tensor self, int[1] kernel_size, int[1] stride=[], int[1] padding=0, bool "
           "ceil_mode=False, bool count_include_pad=True) -> Tensor",
           "aten::slogdet.out(Tensor self, *, Tensor(a!) sign, Tensor(b!) logabsdet) -> (Tensor(a!) sign, "
           "Tensor(b!) logabsdet)",
           "aten::rand.names_out(int[] size, *, str[]? names, Tensor(a!) out) -> Tensor(a!)",
           "aten::_backward(Tensor self, Tensor[] inputs, Tensor? gradient=None, bool? retain_graph=None, bool "
           "create_graph=False) -> ()",
           "extension_cpp::mymuladd(Tensor a, Tensor b, float c) -> Tensor",
       }) {
    EXPECT_EQ(canonical(s), s);
  }
}

// Calls check(line) for each non-blank, non-comment line of a data file, and
// returns how many there were.
int forEachSchemaLine(const char* path, const std::function<void(const std::string&)>& check) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    try {
      check(line);
    } catch (const SchemaError& e) {
      ADD_FAILURE() << e.what();
    }
    ++n;
  }
  return n;
}

// Every line of the corpus: real schemas, each printing back as given or as the
// "=> EXPECTED" form.
TEST(SchemaTest, Corpus) {
  auto trim = [](std::string s) {
    s.erase(0, s.find_first_not_of(' '));
    s.erase(s.find_last_not_of(' ') + 1);
    return s;
  };
  const int checked = forEachSchemaLine(STRATA_SCHEMA_CORPUS, [&](const std::string& line) {
    const auto arrow = line.find(" => ");
    const std::string input = trim(line.substr(0, arrow));
    const std::string expected = arrow == std::string::npos ? input : trim(line.substr(arrow + 4));
    EXPECT_EQ(canonical(input), expected);
  });
  EXPECT_GT(checked, 150);
}

// PyTorch prints two alias sets in its unordered set's order; we sort them.
std::string sortAliasPairs(const std::string& s) {
  static const std::regex pair(R"(\((\w+)\|(\w+)\))");
  std::string out;
  auto last = s.cbegin();
  for (std::sregex_iterator it(s.begin(), s.end(), pair), end; it != end; ++it) {
    out.append(last, (*it)[0].first);
    std::string a = (*it)[1].str(), b = (*it)[2].str();
    if (b < a) std::swap(a, b);
    out += "(" + a + "|" + b + ")";
    last = (*it)[0].second;
  }
  return out.append(last, s.cend());
}

// Every schema PyTorch 1.13 registers, as PyTorch prints it. Ours must print each
// the same, except for the two documented differences (Note [Schema printing]):
// a one-element `int[1]` default prints `0` where PyTorch prints `[0]` (the
// issue's and native_functions.yaml's spelling), and alias sets print sorted.
TEST(SchemaTest, EverySchemaPyTorchRegistersPrintsAsPyTorchPrintsIt) {
  const std::regex one_element_int1(R"((int\[1\]\?? \w+)=\[(-?\d+)\])");
  int normalized = 0;
  const int checked = forEachSchemaLine(STRATA_TORCH_SCHEMAS, [&](const std::string& line) {
    const std::string expected = sortAliasPairs(std::regex_replace(line, one_element_int1, "$1=$2"));
    normalized += expected != line;
    EXPECT_EQ(canonical(line), expected);
  });
  EXPECT_EQ(checked, 3973);
  EXPECT_EQ(normalized, 16);  // 8 int[1] defaults and 8 alias pairs; no others differ
}

// PyTorch 2's native functions: every one parses (SymBool included), and what Strata
// prints parses back to the same schema and prints the same.
TEST(SchemaTest, EveryNativeFunctionOfPyTorch2Parses) {
  int sym_bool = 0;
  const int checked = forEachSchemaLine(STRATA_TORCH2_NATIVE_SCHEMAS, [&](const std::string& line) {
    const std::string printed = canonical(line);
    EXPECT_EQ(printed.substr(0, printed.find('(')), line.substr(0, line.find('(')));
    sym_bool += printed.find("SymBool") != std::string::npos;
  });
  EXPECT_EQ(checked, 2661);
  EXPECT_EQ(sym_bool, 1);
}

std::string schemaError(const char* text) {
  try {
    parseSchema(text);
  } catch (const SchemaError& e) {
    return e.what();
  }
  return "no error";
}

// PyTorch 2's symbolic float and bool: printed as written, checked as float and bool
// (their defaults too).
TEST(SchemaTest, SymFloatAndSymBoolAreTypesOfTheirOwn) {
  const FunctionSchema s = parseSchema(
      "mylib::f(SymFloat x, SymBool b=True, SymFloat? y=None, SymFloat[] z=[1, 2.5], SymBool[2] m=False, "
      "SymFloat w=2) -> (SymFloat, SymBool)");
  EXPECT_EQ(s.str(), "mylib::f(SymFloat x, SymBool b=True, SymFloat? y=None, SymFloat[] z=[1., 2.5], "
                     "SymBool[2] m=[False, False], SymFloat w=2.) -> (SymFloat, SymBool)");
  const auto& a = s.arguments();
  EXPECT_EQ(a[0].type->kind(), TypeKind::SymFloat);
  EXPECT_EQ(a[0].type->valueKind(), TypeKind::Float);
  EXPECT_EQ(a[1].type->kind(), TypeKind::SymBool);
  EXPECT_EQ(a[1].type->valueKind(), TypeKind::Bool);
  EXPECT_EQ(*a[1].default_value, IValue(true));
  EXPECT_EQ(*a[5].default_value, IValue(2.0));
  EXPECT_FALSE(a[0].type->isIntLike());
  EXPECT_EQ(Type::get(TypeKind::Int)->valueKind(), TypeKind::Int);
  // As PyTorch 2 registers it.
  EXPECT_EQ(canonical("aten::sym_is_contiguous(Tensor self, MemoryFormat memory_format=contiguous_format) -> SymBool"),
            "aten::sym_is_contiguous(Tensor self, MemoryFormat memory_format=0) -> SymBool");
  EXPECT_THAT(schemaError("mylib::f(SymBool b=1) -> ()"),
              HasSubstr("expected a default of type SymBool, got a number ('1')"));
  EXPECT_THAT(schemaError("mylib::f(SymFloat x='a') -> ()"),
              HasSubstr("expected a default of type SymFloat, got a string"));
}

TEST(SchemaTest, StructureOfAParsedSchema) {
  const FunctionSchema s = parseSchema(
      "aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)");
  EXPECT_EQ(s.name(), "aten::add");
  EXPECT_EQ(s.ns(), "aten");
  EXPECT_EQ(s.overload_name(), "out");
  ASSERT_EQ(s.arguments().size(), 4u);
  EXPECT_FALSE(s.arguments()[1].kwarg_only);
  EXPECT_TRUE(s.arguments()[2].kwarg_only);
  EXPECT_EQ(s.arguments()[2].type->kind(), TypeKind::Scalar);
  EXPECT_EQ(*s.arguments()[2].default_value, IValue(int64_t{1}));
  const Argument& out = s.arguments()[3];
  ASSERT_TRUE(out.alias_info);
  EXPECT_TRUE(out.is_write());
  EXPECT_EQ(out.alias_info->before_sets, std::vector<std::string>{"a"});
  EXPECT_TRUE(s.is_mutable());
  EXPECT_EQ(s.argumentIndexWithName("alpha"), 2u);
  EXPECT_EQ(s.argumentIndexWithName("nope"), std::nullopt);
  ASSERT_EQ(s.returns().size(), 1u);
  EXPECT_TRUE(s.returns()[0].is_write());
}

TEST(SchemaTest, SuffixesInAnyOrderAreDifferentTypes) {
  const FunctionSchema s = parseSchema("mylib::f(Tensor?[] a, Tensor[]? b, int[2] c, SymInt[] d) -> ()");
  const auto& a = s.arguments();
  EXPECT_EQ(a[0].type->kind(), TypeKind::List);
  EXPECT_EQ(a[0].type->element()->kind(), TypeKind::Optional);
  EXPECT_EQ(a[1].type->kind(), TypeKind::Optional);
  EXPECT_EQ(a[1].type->element()->kind(), TypeKind::List);
  EXPECT_FALSE(*a[0].type == *a[1].type);
  EXPECT_EQ(a[2].N, 2);
  EXPECT_EQ(a[3].type->element()->kind(), TypeKind::SymInt);
  EXPECT_TRUE(a[3].type->element()->isIntLike());
}

TEST(SchemaTest, DefaultsAreTypedValues) {
  const FunctionSchema s = parseSchema(
      "mylib::f(int a=-3, float b=1e-05, bool c=True, str d='x', int[2] e=1, float[] f=[], "
      "MemoryFormat g=contiguous_format, int? h=None, Scalar i=2.5, Device j=\"cuda:0\") -> ()");
  const auto& a = s.arguments();
  EXPECT_EQ(*a[0].default_value, IValue(int64_t{-3}));
  EXPECT_EQ(*a[1].default_value, IValue(1e-05));
  EXPECT_EQ(*a[2].default_value, IValue(true));
  EXPECT_EQ(*a[3].default_value, IValue("x"));
  EXPECT_EQ(*a[4].default_value, IValue(std::vector<int64_t>{1, 1}));
  EXPECT_EQ(*a[5].default_value, IValue(std::vector<double>{}));
  EXPECT_EQ(*a[6].default_value, IValue(int64_t{0}));
  EXPECT_TRUE(a[7].default_value->isNone());
  EXPECT_EQ(*a[8].default_value, IValue(2.5));
  EXPECT_EQ(*a[9].default_value, IValue(Device(DeviceType::CUDA, 0)));
}

TEST(SchemaTest, NameAloneParsesAsAName) {
  const auto parsed = parseSchemaOrName("mylib::foo.bar");
  ASSERT_TRUE(std::holds_alternative<OperatorName>(parsed));
  EXPECT_EQ(std::get<OperatorName>(parsed).str(), "mylib::foo.bar");
  EXPECT_EQ(parseName("foo").name, "foo");
  EXPECT_THROW(parseSchema("mylib::foo"), SchemaError);
  EXPECT_THROW(parseName("mylib::foo(Tensor x) -> Tensor"), SchemaError);
}

// parseName reads plain "ns::name[.overload]" without the lexer; it must agree with
// the parser on every name, the plain ones and those it leaves to the parser.
TEST(SchemaTest, NamesReadWithoutTheLexerAgreeWithTheParser) {
  for (const char* text : {"mylib::foo", "mylib::foo.out", "a::b", "_x9::_Y_.o2", "bench_reg::op12345",
                           "ns::the_operator_with_a_long_name.an_overload"}) {
    const auto parsed = parseSchemaOrName(text);
    ASSERT_TRUE(std::holds_alternative<OperatorName>(parsed)) << text;
    EXPECT_EQ(parseName(text), std::get<OperatorName>(parsed)) << text;
  }
  EXPECT_EQ(parseName(" mylib :: foo . bar ").str(), "mylib::foo.bar");  // the parser's spacing rules
  // Refused either way, with the parser's reasons.
  for (const char* text : {"ns::for", "for::x", "ns::a.default", "ns::a.__x", "ns::a.b.c", "ns::a.", "ns::",
                           "::a", "ns::1a", "ns::a.None", "a::b::c", "ns::a-b", "ns::$0", ""}) {
    EXPECT_THROW(parseName(text), SchemaError) << text;
    EXPECT_THROW(parseSchemaOrName(text), SchemaError) << text;
  }
  auto reason = [](const char* text) -> std::string {
    try {
      parseName(text);
    } catch (const SchemaError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_THAT(reason("ns::a.default"), HasSubstr("'default' is not a legal overload name"));
  EXPECT_THAT(reason("ns::while"), HasSubstr("keyword 'while'"));
}

TEST(SchemaTest, TypeVariablesOnlyWhereAllowed) {
  const SchemaParseOptions strict{.allow_typevars = false};
  EXPECT_NO_THROW(parseSchema("mylib::f(t x) -> t"));  // allowed by default, as in PyTorch
  EXPECT_NO_THROW(parseSchema("aten::f(t x) -> t", strict));
  EXPECT_NO_THROW(parseSchema("prim::f(t[] x) -> t", strict));
  EXPECT_THROW(parseSchema("mylib::f(t x) -> t", strict), SchemaError);
}

TEST(SchemaTest, RepeatedArgumentNamesAreAcceptedAsInPyTorch) {
  // A real registered schema.
  const std::string s =
      "static_runtime::clamp_nan_to_num(Tensor input, Scalar? min, Scalar? max, float? nan, float? posinf, "
      "float? posinf) -> Tensor";
  EXPECT_EQ(canonical(s), s);
}

// Each bad input: the column of the fault and what was expected.
struct BadSchema {
  const char* text;
  size_t column;
  const char* reason;
};

void PrintTo(const BadSchema& b, std::ostream* os) { *os << "'" << b.text << "' (column " << b.column << ")"; }

class SchemaErrorTest : public ::testing::TestWithParam<BadSchema> {};

TEST_P(SchemaErrorTest, NamesTheColumnAndTheReason) {
  const BadSchema& bad = GetParam();
  try {
    parseSchema(bad.text);
    ADD_FAILURE() << "parsed: " << bad.text;
  } catch (const SchemaError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Schema);
    EXPECT_EQ(e.column(), bad.column) << e.what();
    EXPECT_THAT(e.reason(), HasSubstr(bad.reason));
    EXPECT_THAT(e.what(), HasSubstr(bad.text));
  }
}

std::string caseName(const ::testing::TestParamInfo<BadSchema>& info) {
  return "case" + std::to_string(info.index) + "_column" + std::to_string(info.param.column);
}

INSTANTIATE_TEST_SUITE_P(
    Bad, SchemaErrorTest,
    ::testing::Values(
        BadSchema{"", 1, "expected an operator name, got the end of the schema"},
        BadSchema{"(Tensor x) -> Tensor", 1, "expected an operator name, got '('"},
        BadSchema{"aten::add(", 11, "expected a type, got the end of the schema"},
        BadSchema{"aten::add(Tensor self) ->", 26, "expected a type, got the end"},
        BadSchema{"aten::add(Tensor self) Tensor", 24, "expected '->' after the argument list"},
        BadSchema{"aten::add(Tensr self) -> Tensor", 11, "unknown type 'Tensr'"},
        BadSchema{"mylib::f(T x) -> T", 10, "unknown type 'T'"},
        BadSchema{"aten::f(Tensor) -> ()", 15, "expected an argument name after the type 'Tensor', got ')'"},
        BadSchema{"aten::f(Tensor x Tensor y) -> ()", 18, "expected ',' or ')' in the argument list"},
        BadSchema{"aten::f(..., Tensor x) -> ()", 14, "'...' must be the last element"},
        BadSchema{"aten::f(Tensor x, ...) -> (..., Tensor)", 33, "'...' must be the last element of the return list"},
        BadSchema{"aten::f(Tensor(a x) -> ()", 18, "expected ')' to close the alias annotation"},
        BadSchema{"aten::f(Tensor() x) -> ()", 16, "an alias set name"},
        BadSchema{"aten::f(int x=1.5) -> ()", 15, "expected a default of type int, got a float ('1.5')"},
        BadSchema{"aten::f(str x=1) -> ()", 15, "expected a default of type str, got a number ('1')"},
        BadSchema{"aten::f(bool x=\"no\") -> ()", 16, "expected a default of type bool, got a string ('\"no\"')"},
        BadSchema{"aten::f(Tensor x=1) -> ()", 18, "None (the only default a Tensor argument can have)"},
        BadSchema{"aten::f(int[2] x=[1, 2) -> ()", 23, "expected ',' or ']' in the list default"},
        BadSchema{"aten::f(int x=Medium) -> ()", 15, "invalid default value 'Medium'"},
        BadSchema{"aten::f(int x=-2j) -> ()", 15, "expected a default of type int, got an imaginary number ('-2j')"},
        BadSchema{"aten::f(Tensor x, or y) -> ()", 19, "expected a type, got the keyword 'or'"},
        BadSchema{"aten::f(Tensor in) -> ()", 16, "expected an argument name after the type 'Tensor', got the keyword 'in'"},
        BadSchema{"aten::for(Tensor x) -> ()", 7, "got the keyword 'for'"},
        BadSchema{"aten::f(Tensor x) -> Tensor True", 29, "expected the end of the schema, got 'True'"},
        BadSchema{"aten::f(Dict(int[], t) x) -> ()", 14, "'int[]' cannot be a Dict key"},
        BadSchema{"aten::f(int x=99999999999999999999) -> ()", 15, "does not fit in 64 bits"},
        BadSchema{"aten::f(float x=1e999) -> ()", 17, "out of range"},
        BadSchema{"aten::f(str s=\"abc) -> ()", 15, "unterminated string literal"},
        BadSchema{"aten::f(str s=\"a\\qb\") -> ()", 17, "unknown escape sequence"},
        BadSchema{"aten::f(Device d=\"gpu\") -> ()", 18, "invalid device 'gpu'"},
        BadSchema{"aten::f(int x=1, int y) -> ()", 18, "non-default argument 'y' follows a default argument"},
        BadSchema{"aten::f(int x=1, ...) -> ()", 9, "cannot have default values"},
        BadSchema{"aten::f.default(Tensor x) -> ()", 9, "'default' is not a legal overload name"},
        BadSchema{"aten::f.__x(Tensor x) -> ()", 9, "may not start with '__'"},
        BadSchema{"aten::f(int[x] y) -> ()", 13, "a list size"},
        BadSchema{"aten::f(int[-1] y) -> ()", 13, "a list size"},
        BadSchema{"aten::f(Tensor x) -> Tensor out extra", 33, "expected the end of the schema, got 'extra'"},
        BadSchema{"aten::f(Tensor x) -> (Tensor", 29, "expected ',' or ')' in the return list"},
        BadSchema{"aten::f(Tensor x) -> Tensor(a!", 31, "')' to close the alias annotation"},
        BadSchema{"aten::f(Dict(str) x) -> ()", 17, "',' between the key and value types"},
        BadSchema{"aten::f(int 1x) -> ()", 13, "malformed number '1x'"},
        BadSchema{"aten::f(Tensor \xc3\xa9) -> ()", 16, "expected an argument name"},
        BadSchema{"aten:f(Tensor x) -> ()", 6, "'::' between the namespace"},
        BadSchema{"aten::f(__torch__.torch.cls.x.Y a) -> ()", 25, "expected 'classes'"},
        BadSchema{"aten::f(Any x=1) -> ()", 15, "default values are not supported for arguments of type 'Any'"},
        BadSchema{"aten::f(Tensor[] x=[1]) -> ()", 20, "list defaults are only supported"},
        BadSchema{"aten::f(int[2] x=[None, 1]) -> ()", 19, "None cannot be an element of a list default"},
        // One value repeated N times: the fuzzer's complex[811111111] z=1j asked for 13 GB.
        BadSchema{"aten::f(complex[811111111] z=1j) -> ()", 30, "a list size above 65536 with a single default"},
        BadSchema{"aten::f(int[40000] a=1, int[30000] b=2) -> ()", 38,
                  "would hold more than 65536 values in all"}),
    caseName);

// A lower-case unknown name is a type variable where they are allowed (as in
// PyTorch, so 'double' is one there); strict parsing names the C++ type's
// schema spelling instead.
TEST(SchemaTest, CxxTypeNamesGetAHintWhenTypeVariablesAreOff) {
  EXPECT_EQ(parseSchema("aten::f(double x) -> ()").arguments()[0].type->kind(), TypeKind::Var);
  try {
    parseSchema("mylib::f(double x) -> ()", {.allow_typevars = false});
    ADD_FAILURE();
  } catch (const SchemaError& e) {
    EXPECT_EQ(e.column(), 10u);
    EXPECT_THAT(e.reason(), HasSubstr("use 'float' (a C++ double) in schemas"));
  }
}

TEST(SchemaTest, DeepNestingIsAnErrorNotAStackOverflow) {
  for (const char* open : {"Dict(str, ", "(", "Future(", "Union(int, "}) {
    std::string text = "aten::f(";
    for (int i = 0; i < 100000; ++i) text += open;
    try {
      parseSchema(text);
      ADD_FAILURE();
    } catch (const SchemaError& e) {
      EXPECT_THAT(e.reason(), HasSubstr("types nest more than 64 levels deep")) << open;
    }
  }
  // 64 levels still parse and print.
  std::string ok = "aten::f(";
  for (int i = 0; i < 63; ++i) ok += "Future(";
  ok += "int";
  for (int i = 0; i < 63; ++i) ok += ")";
  ok += " x) -> ()";
  EXPECT_EQ(canonical(ok), ok);
}

// `[]` and `?` nest a type as deeply as parentheses do, under the same limit.
TEST(SchemaTest, DeepListAndOptionalSuffixesAreAnErrorNotAStackOverflow) {
  for (const char* suffix : {"[]", "?", "[]?"}) {
    std::string text = "aten::f(Tensor";
    for (int i = 0; i < 50000; ++i) text += suffix;
    text += " x) -> ()";
    try {
      parseSchema(text);
      ADD_FAILURE() << suffix;
    } catch (const SchemaError& e) {
      EXPECT_THAT(e.reason(), HasSubstr("types nest more than 64 levels deep")) << suffix;
    }
  }
  std::string ok = "aten::f(Tensor";
  for (int i = 0; i < 63; ++i) ok += "[]";
  EXPECT_EQ(parseSchema(ok + " x) -> ()").str(), ok + " x) -> ()");
}

TEST(SchemaTest, NulBytesAreRejectedNotSkipped) {
  const std::string text("aten::f(Tensor\0 x) -> ()", 24);
  try {
    parseSchema(text);
    ADD_FAILURE();
  } catch (const SchemaError& e) {
    EXPECT_EQ(e.column(), 15u);
  }
}

TEST(SchemaTest, AliasAnnotationsKeepTheirStructure) {
  const FunctionSchema s = parseSchema("aten::f(Tensor(a -> *) x, Tensor(a!)[] y, Tensor! z, Tensor(a|b) w) -> ()");
  const auto& a = s.arguments();
  EXPECT_EQ(a[0].alias_info->after_sets, std::vector<std::string>{"*"});
  EXPECT_TRUE(a[0].alias_info->isWildcardAfter());
  EXPECT_TRUE(a[1].alias_info->before_sets.empty());
  ASSERT_EQ(a[1].alias_info->contained.size(), 1u);
  EXPECT_TRUE(a[1].alias_info->contained[0].is_write);
  EXPECT_EQ(a[2].alias_info->before_sets, std::vector<std::string>{"$0"});
  EXPECT_EQ(a[3].alias_info->before_sets, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s.str(), "aten::f(Tensor(a -> *) x, Tensor(a!)[] y, Tensor($0!) z, Tensor(a|b) w) -> ()");
}

TEST(SchemaTest, DefaultStrIsWhatThePrinterPrints) {
  const FunctionSchema s = parseSchema("mylib::f(Tensor d, int[2] a=1, str b='x', float c=1e-05) -> ()");
  EXPECT_EQ(s.arguments()[0].defaultStr(), "");
  EXPECT_EQ(s.arguments()[1].defaultStr(), "1");
  EXPECT_EQ(s.arguments()[2].defaultStr(), "\"x\"");
  EXPECT_EQ(s.arguments()[3].defaultStr(), "1.0000000000000001e-05");
}

TEST(SchemaTest, SignatureWithoutName) {
  EXPECT_EQ(parseSchema("mylib::f(Tensor x, *, int k=2) -> Tensor").signatureStr(), "(Tensor x, *, int k=2) -> Tensor");
}

}  // namespace
}  // namespace strata
