// IValue and Stack: boxing, checked accessors, sharing, equality.
#include "strata/ivalue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "../dispatch/test_util.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string errorOf(const std::function<void()>& f) { return strata::testing::errorOf(ErrorKind::Type, f); }

TEST(IValueTest, HoldsEveryKindItPromises) {
  EXPECT_TRUE(IValue().isNone());
  EXPECT_TRUE(IValue(std::nullopt).isNone());
  EXPECT_EQ(IValue(int64_t{7}).toInt(), 7);
  EXPECT_EQ(IValue(2.5).toDouble(), 2.5);
  EXPECT_EQ(IValue(true).toBool(), true);
  EXPECT_EQ(IValue("hi").toStringRef(), "hi");
  EXPECT_THAT(IValue(std::vector<int64_t>{1, 2}).toIntList(), ElementsAre(1, 2));
  EXPECT_THAT(IValue(std::vector<double>{0.5}).toDoubleList(), ElementsAre(0.5));
  EXPECT_THAT(IValue(std::vector<bool>{true, false}).toBoolList(), ElementsAre(true, false));
  EXPECT_EQ(IValue(kBFloat16).toScalarType(), kBFloat16);
  EXPECT_EQ(IValue(Device("cuda:1")).toDevice(), Device(DeviceType::CUDA, 1));
  const Tensor t = zeros({2});
  EXPECT_EQ(IValue(t).toTensor().unsafeGetTensorImpl(), t.unsafeGetTensorImpl());
  EXPECT_EQ(IValue(std::vector<Tensor>{t, t}).toTensorList().size(), 2u);
  const IValue generic(std::vector<IValue>{IValue(1), IValue("a"), IValue()});
  EXPECT_EQ(generic.toList().size(), 3u);
  EXPECT_TRUE(generic.toList()[2].isNone());
  EXPECT_EQ(IValue(std::complex<double>(1, 2)).toComplex(), std::complex<double>(1, 2));
  EXPECT_EQ(sizeof(IValue), 16u);
}

TEST(IValueTest, OptionalTensor) {
  EXPECT_FALSE(IValue().toOptionalTensor().has_value());
  EXPECT_TRUE(IValue(zeros({1})).toOptionalTensor().has_value());
  EXPECT_TRUE(IValue(std::optional<Tensor>()).isNone());
  EXPECT_THAT(errorOf([] { (void)IValue(int64_t{1}).toOptionalTensor(); }),
              HasSubstr("expected Tensor or None, got int"));
}

TEST(IValueTest, WrongAccessorNamesBothTypes) {
  EXPECT_THAT(errorOf([] { (void)IValue(int64_t{1}).toTensor(); }), HasSubstr("expected Tensor, got int"));
  EXPECT_THAT(errorOf([] { (void)IValue(zeros({1})).toInt(); }), HasSubstr("expected int, got Tensor"));
  EXPECT_THAT(errorOf([] { (void)IValue(1.0).toInt(); }), HasSubstr("expected int, got float"));
  EXPECT_THAT(errorOf([] { (void)IValue().toDouble(); }), HasSubstr("expected float, got None"));
  EXPECT_THAT(errorOf([] { (void)IValue("s").toBool(); }), HasSubstr("expected bool, got str"));
  EXPECT_THAT(errorOf([] { (void)IValue(std::vector<double>{}).toIntList(); }),
              HasSubstr("expected int[], got float[]"));
  EXPECT_THAT(errorOf([] { (void)IValue(true).toScalarType(); }), HasSubstr("expected ScalarType, got bool"));
  EXPECT_THAT(errorOf([] { (void)IValue("x").toScalar(); }), HasSubstr("expected Scalar"));
  EXPECT_THAT(errorOf([] { (void)IValue(int64_t{1}).to<std::string>(); }), HasSubstr("expected str, got int"));
}

TEST(IValueTest, ScalarTypesBoxAsIntsToo) {
  // Schemas pass dtypes as ints (PyTorch's codes); both forms read back.
  EXPECT_EQ(IValue(int64_t{6}).toScalarType(), kFloat32);
  EXPECT_EQ(IValue(int64_t{15}).toScalarType(), kBFloat16);
  try {
    (void)IValue(int64_t{99}).toScalarType();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Value);
    EXPECT_THAT(e.what(), HasSubstr("99 is not a ScalarType code"));
  }
}

TEST(IValueTest, ScalarsBoxAsTheirKind) {
  EXPECT_TRUE(IValue(Scalar(3)).isInt());
  EXPECT_TRUE(IValue(Scalar(3.5)).isDouble());
  EXPECT_TRUE(IValue(Scalar(true)).isBool());
  EXPECT_EQ(IValue(2.5).toScalar().toDouble(), 2.5);
  EXPECT_EQ(IValue(int64_t{4}).to<Scalar>().toLong(), 4);
}

TEST(IValueTest, GenericToHandlesOptionalsAndLists) {
  EXPECT_EQ(IValue().to<std::optional<int64_t>>(), std::nullopt);
  EXPECT_EQ(IValue(int64_t{3}).to<std::optional<int64_t>>(), 3);
  EXPECT_THAT(IValue(std::vector<int64_t>{4, 5}).to<ArrayRef<int64_t>>(), ElementsAre(4, 5));
  EXPECT_EQ(IValue("x").to<std::string_view>(), "x");
}

// Every type infer_schema accepts boxes and unboxes: lists of other element
// types (str[], Tensor?[], int[][]) travel as generic lists.
TEST(IValueTest, OtherListsBoxAsGenericLists) {
  const IValue strs(std::vector<std::string>{"a", "b"});
  EXPECT_TRUE(strs.isGenericList());
  EXPECT_EQ(strs.to<std::vector<std::string>>(), (std::vector<std::string>{"a", "b"}));
  const Tensor t = zeros({1});
  const IValue opt(std::vector<std::optional<Tensor>>{t, std::nullopt});
  const auto back = opt.to<std::vector<std::optional<Tensor>>>();
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0]->unsafeGetTensorImpl(), t.unsafeGetTensorImpl());
  EXPECT_FALSE(back[1].has_value());
  const IValue nested(std::vector<std::vector<int64_t>>{{1}, {2, 3}});
  EXPECT_EQ(nested.to<std::vector<std::vector<int64_t>>>()[1], (std::vector<int64_t>{2, 3}));
  EXPECT_THROW(IValue(std::vector<IValue>{IValue(1)}).to<std::vector<std::string>>(), Error);
  EXPECT_TRUE(IValue(std::vector<int32_t>{1, 2}).isIntList());  // widened, not generic
  EXPECT_TRUE(IValue(std::vector<float>{0.5f}).isDoubleList());
  EXPECT_THROW(IValue(int64_t{1}).to<std::vector<std::string>>(), Error);
}

TEST(IValueTest, CopiesShareMovesEmpty) {
  const Tensor t = zeros({1});
  const uint32_t base = t.getIntrusivePtr().use_count();
  IValue a(t);
  EXPECT_EQ(t.getIntrusivePtr().use_count(), base + 1);
  IValue b = a;
  EXPECT_EQ(t.getIntrusivePtr().use_count(), base + 2);
  IValue c = std::move(a);
  EXPECT_TRUE(a.isNone());  // NOLINT: moved-from is None by contract
  EXPECT_EQ(t.getIntrusivePtr().use_count(), base + 2);
  Tensor out = std::move(c).toTensor();
  EXPECT_EQ(t.getIntrusivePtr().use_count(), base + 2);  // the reference moved out
  b = IValue();
  out = Tensor();
  EXPECT_EQ(t.getIntrusivePtr().use_count(), base);
}

TEST(IValueTest, EqualityAndRepr) {
  EXPECT_EQ(IValue(std::vector<int64_t>{1, 2}), IValue(std::vector<int64_t>{1, 2}));
  EXPECT_NE(IValue(int64_t{1}), IValue(1.0));
  EXPECT_NE(IValue(zeros({1})), IValue(zeros({1})));  // tensors by identity
  EXPECT_EQ(IValue(std::vector<IValue>{IValue(1), IValue("a")}).repr(), "[1, \"a\"]");
  EXPECT_EQ(IValue(2.0).repr(), "2.");
  EXPECT_EQ(IValue(0.1).repr(), "0.10000000000000001");
  EXPECT_EQ(IValue(kFloat16).repr(), "float16");
  EXPECT_EQ(IValue().repr(), "None");
}

std::string indexErrorOf(const std::function<void()>& f) { return strata::testing::errorOf(ErrorKind::Index, f); }

std::vector<int64_t> ints(const Stack& s) {
  std::vector<int64_t> out;
  for (const IValue& v : s) out.push_back(v.toInt());
  return out;
}
Stack iota(int64_t n) {
  Stack s;
  for (int64_t i = 0; i < n; ++i) s.emplace_back(i);
  return s;
}

// Note [Stacks in place]: a Stack is a vector whose first values live in the object.
TEST(StackTest, HoldsItsFirstValuesInPlaceAndMovesToTheHeapAfter) {
  Stack s;
  EXPECT_TRUE(s.inPlace());
  EXPECT_EQ(s.capacity(), Stack::kInline);
  for (int64_t i = 0; i < static_cast<int64_t>(Stack::kInline); ++i) s.push_back(IValue(i));
  EXPECT_TRUE(s.inPlace());
  s.emplace_back(zeros({2}));  // one more: to the heap, the values kept
  EXPECT_FALSE(s.inPlace());
  EXPECT_GT(s.capacity(), Stack::kInline);
  ASSERT_EQ(s.size(), Stack::kInline + 1);
  for (int64_t i = 0; i < static_cast<int64_t>(Stack::kInline); ++i) EXPECT_EQ(s[static_cast<size_t>(i)].toInt(), i);
  EXPECT_TRUE(s.back().isTensor());
  s.pop_back();
  EXPECT_EQ(s.size(), Stack::kInline);
  s.clear();
  EXPECT_TRUE(s.empty());
}

TEST(StackTest, AValueThatFailsToBeMadeIsNotCounted) {
  Stack s = iota(3);
  const char* none = nullptr;  // std::string(nullptr) throws
  EXPECT_ANY_THROW(s.emplace_back(none));
  EXPECT_EQ(ints(s), (std::vector<int64_t>{0, 1, 2}));
  s.emplace_back("ok");
  EXPECT_EQ(s.back().toStringView(), "ok");
  Stack full = iota(static_cast<int64_t>(Stack::kInline));
  EXPECT_ANY_THROW(full.emplace_back(none));  // on the growing path too
  EXPECT_EQ(full.size(), Stack::kInline);
}

TEST(StackTest, PushingOneOfItsOwnValuesWhenFullIsSafe) {
  Stack s = iota(static_cast<int64_t>(Stack::kInline));
  s.push_back(s[0]);  // the reference points into the block that grows
  s.emplace_back(s[1]);
  const Stack big = iota(40);
  Stack t = big;
  t.push_back(t[3]);
  EXPECT_EQ(s[Stack::kInline].toInt(), 0);
  EXPECT_EQ(s[Stack::kInline + 1].toInt(), 1);
  EXPECT_EQ(t.back().toInt(), 3);
  s.resize(60, s[2]);
  EXPECT_EQ(s.back().toInt(), 2);
}

TEST(StackTest, CopiesMovesAndSwapsInPlaceAndOnTheHeap) {
  for (int64_t a : {0, 3, 8, 20}) {
    for (int64_t b : {0, 2, 9, 33}) {
      Stack x = iota(a), y = iota(b);
      for (IValue& v : y) v = IValue(v.toInt() + 100);
      const std::vector<int64_t> xs = ints(x), ys = ints(y);
      x.swap(y);
      EXPECT_EQ(ints(x), ys) << a << " " << b;
      EXPECT_EQ(ints(y), xs) << a << " " << b;
      swap(x, y);
      EXPECT_EQ(ints(x), xs);
      Stack c = x;  // copy
      EXPECT_EQ(ints(c), xs);
      Stack m = std::move(c);  // move: c is left empty, usable
      EXPECT_EQ(ints(m), xs);
      EXPECT_TRUE(c.empty());  // NOLINT(bugprone-use-after-move): defined, as for vector
      c.push_back(IValue(int64_t{7}));
      EXPECT_EQ(ints(c), std::vector<int64_t>{7});
      m = y;  // copy-assign over values
      EXPECT_EQ(ints(m), ys);
      m = std::move(x);
      EXPECT_EQ(ints(m), xs);
      m = m;  // NOLINT: self-assignment keeps the values
      EXPECT_EQ(ints(m), xs);
    }
  }
}

TEST(StackTest, InsertsAndErasesAnywhereAsAVectorDoes) {
  for (int64_t n : {0, 1, 5, 7, 8, 12}) {
    for (int64_t at = 0; at <= n; ++at) {
      for (int64_t k : {1, 3, 10}) {
        Stack s = iota(n);
        std::vector<int64_t> want = ints(s);
        std::vector<IValue> extra;
        for (int64_t i = 0; i < k; ++i) extra.emplace_back(1000 + i);
        auto it = s.insert(s.begin() + at, extra.begin(), extra.end());
        for (int64_t i = 0; i < k; ++i) want.insert(want.begin() + at + i, 1000 + i);
        EXPECT_EQ(it - s.begin(), at);
        EXPECT_EQ(ints(s), want) << n << " " << at << " " << k;
        it = s.erase(s.begin() + at, s.begin() + at + k);
        want.erase(want.begin() + at, want.begin() + at + k);
        EXPECT_EQ(it - s.begin(), at);
        EXPECT_EQ(ints(s), want);
        s.insert(s.begin() + at, IValue(int64_t{-1}));
        want.insert(want.begin() + at, -1);
        EXPECT_EQ(ints(s), want);
        s.erase(s.begin() + at);
        want.erase(want.begin() + at);
        EXPECT_EQ(ints(s), want);
      }
    }
  }
  Stack s = iota(4);
  s.insert(s.begin() + 1, s.begin(), s.end());  // a range of its own values
  EXPECT_EQ(ints(s), (std::vector<int64_t>{0, 0, 1, 2, 3, 1, 2, 3}));
}

TEST(StackTest, ConvertsToAndFromAVectorAndChecksAt) {
  std::vector<IValue> v{IValue(int64_t{1}), IValue(zeros({3})), IValue(2.5)};
  Stack s = v;
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1].toTensor().unsafeGetTensorImpl(), v[1].toTensor().unsafeGetTensorImpl());  // shared, as copies share
  const std::vector<IValue> back = s;
  EXPECT_EQ(back.size(), 3u);
  EXPECT_EQ(s.vec()[2].toDouble(), 2.5);
  Stack moved(std::move(v));
  EXPECT_EQ(moved.size(), 3u);
  EXPECT_TRUE(s == moved);
  moved.resize(1);
  EXPECT_FALSE(s == moved);
  EXPECT_EQ(s.at(2).toDouble(), 2.5);
  EXPECT_THAT(indexErrorOf([&] { s.at(3); }), HasSubstr("Stack::at(3): out of range for a Stack of 3 values"));
  Stack r{IValue(int64_t{1}), IValue(int64_t{2}), IValue(int64_t{3})};
  EXPECT_EQ(ints(Stack(r.rbegin(), r.rend())), (std::vector<int64_t>{3, 2, 1}));
  r.assign(5, IValue(int64_t{9}));
  EXPECT_EQ(ints(r), (std::vector<int64_t>(5, 9)));
}

TEST(StackTest, BuildsValuesInPlaceInOrder) {
  const Tensor t = zeros({2});
  Stack few(std::in_place, IValue(t), IValue(2.0), IValue(int64_t{3}));
  ASSERT_EQ(few.size(), 3u);
  EXPECT_TRUE(few.inPlace());
  EXPECT_EQ(few[0].toTensor().unsafeGetTensorImpl(), t.unsafeGetTensorImpl());
  EXPECT_EQ(few[1].toDouble(), 2.0);
  EXPECT_EQ(few[2].toInt(), 3);
  Stack many(std::in_place, IValue(int64_t{0}), IValue(int64_t{1}), IValue(int64_t{2}), IValue(int64_t{3}),
             IValue(int64_t{4}), IValue(int64_t{5}), IValue(int64_t{6}), IValue(int64_t{7}), IValue(int64_t{8}),
             IValue(int64_t{9}));
  EXPECT_FALSE(many.inPlace());
  EXPECT_EQ(ints(many), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

// What a braced Stack of one argument compiles to: a number whose conversion to an
// IValue is ambiguous is refused, as a list of IValues refused it, not taken as
// Stack(n)'s count.
template <typename T>
concept BracedStackOf = requires(T x) { Stack{x}; };
template <typename T>
concept BracedStackOfTwo = requires(T x) { Stack{x, x}; };
static_assert(BracedStackOf<int> && BracedStackOf<int64_t> && BracedStackOf<double> && BracedStackOf<bool>);
static_assert(!BracedStackOf<size_t> && !BracedStackOf<unsigned> && !BracedStackOf<long long>);
static_assert(!BracedStackOfTwo<unsigned> && !BracedStackOfTwo<uint64_t>);
static_assert(BracedStackOf<Tensor> && BracedStackOf<std::string> && BracedStackOf<const char*>);

// `Stack st{a, b, 2.0}` builds each value once, from its argument, in place: it takes
// what a braced list of IValues takes, and what that does not take keeps its meaning.
TEST(StackTest, ABracedListBuildsEachValueFromItsArgument) {
  const Tensor t = zeros({2});
  Tensor u = ones({3});
  const TensorImpl* u_impl = u.unsafeGetTensorImpl();
  const std::optional<Tensor> maybe = t;
  {
    Stack s{t, 2.0, 2.5f, int64_t{3}, 4, true, "str", std::string("s"), std::string_view("v"), std::nullopt,
            maybe, ScalarType::Half, IValue(int64_t{9}), std::move(u)};
    ASSERT_EQ(s.size(), 14u);
    EXPECT_FALSE(s.inPlace());  // more than kInline values: on the heap, as a list would be
    EXPECT_EQ(s[0].toTensor().unsafeGetTensorImpl(), t.unsafeGetTensorImpl());
    EXPECT_EQ(s[1].toDouble(), 2.0);
    EXPECT_EQ(s[2].toDouble(), 2.5);
    EXPECT_EQ(s[3].toInt(), 3);
    EXPECT_EQ(s[4].toInt(), 4);
    EXPECT_TRUE(s[5].isBool() && s[5].toBool());
    EXPECT_EQ(s[6].toStringView(), "str");
    EXPECT_EQ(s[7].toStringView(), "s");
    EXPECT_EQ(s[8].toStringView(), "v");
    EXPECT_TRUE(s[9].isNone());
    EXPECT_EQ(s[10].toTensor().unsafeGetTensorImpl(), t.unsafeGetTensorImpl());
    EXPECT_EQ(s[11].toScalarType(), ScalarType::Half);
    EXPECT_EQ(s[12].toInt(), 9);
    EXPECT_EQ(s[13].toTensor().unsafeGetTensorImpl(), u_impl);  // an rvalue is moved in
    EXPECT_FALSE(u.defined());                                    // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(t.getIntrusivePtr().use_count(), 4u);               // t, maybe, s[0], s[10]
    Stack few = {t, 1};                                           // copy-list-initialization
    EXPECT_TRUE(few.inPlace());
    EXPECT_EQ(few.size(), 2u);
  }
  EXPECT_EQ(t.getIntrusivePtr().use_count(), 2u);  // t and maybe: every value dropped
  // A value that fails to be made: the ones before it are dropped, nothing leaks.
  const char* none = nullptr;  // std::string(nullptr) throws
  EXPECT_ANY_THROW((Stack{t, t, none}));
  EXPECT_EQ(t.getIntrusivePtr().use_count(), 2u);
  // `{}` is None; a const rvalue is copied, not moved from.
  const Stack nones{{}, 3, {}};
  ASSERT_EQ(nones.size(), 3u);
  EXPECT_TRUE(nones[0].isNone());
  EXPECT_EQ(nones[1].toInt(), 3);
  EXPECT_TRUE(nones[2].isNone());
  const Tensor kept = zeros({1});
  const Stack copied{std::move(kept)};  // NOLINT(performance-move-const-arg): the point
  EXPECT_TRUE(kept.defined());
  EXPECT_EQ(copied[0].toTensor().unsafeGetTensorImpl(), kept.unsafeGetTensorImpl());
  // What a list of IValues does not take keeps its meaning.
  EXPECT_EQ(Stack{3}.size(), 1u);  // an int is a value
  const Stack r = iota(4);
  EXPECT_EQ(ints(Stack{r.begin() + 1, r.end()}), (std::vector<int64_t>{1, 2, 3}));  // pointers: a range
  EXPECT_EQ(ints(Stack{r}), ints(r));                                                // a Stack: a copy
  const std::vector<IValue> list{IValue(int64_t{1}), IValue(int64_t{2})};
  ASSERT_EQ(Stack{list}.size(), 1u);  // a vector of IValues is one value, a list, as before
  EXPECT_TRUE(Stack{list}[0].isGenericList());
  EXPECT_EQ(ints(Stack(2, IValue(int64_t{5}))), (std::vector<int64_t>{5, 5}));  // (count, value)
}

TEST(StackTest, RefusesWhatItCannotHoldAndInsertsPastItsEnd) {
  Stack s = iota(3);
  EXPECT_THAT(indexErrorOf([&] { s.reserve(Stack::kInline + (size_t{1} << 28)); }),
              HasSubstr("values: more than the 268435456 values a Stack holds"));
  EXPECT_THAT(indexErrorOf([&] { s.insert(s.begin() + 5, IValue(int64_t{9})); }),
              HasSubstr("Stack::insert at position 5: past the end of a Stack of 3 values"));
  EXPECT_EQ(ints(s), (std::vector<int64_t>{0, 1, 2}));  // nothing half-applied
}

TEST(StackTest, PushPopPeekDrop) {
  Stack s;
  push(s, zeros({1}), 2.0, int64_t{3});
  EXPECT_EQ(s.size(), 3u);
  EXPECT_TRUE(peek(s, 0, 3).isTensor());
  EXPECT_EQ(peek(s, 1, 2).toInt(), 3);
  EXPECT_EQ(pop(s).toInt(), 3);
  drop(s, 1);
  EXPECT_EQ(s.size(), 1u);
  EXPECT_THROW(drop(s, 2), Error);
  EXPECT_THROW(peek(s, 1, 1), Error);
  pop(s);
  EXPECT_THROW(pop(s), Error);
}

}  // namespace
}  // namespace strata
