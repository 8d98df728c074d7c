#include "worker/tensor/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/json.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/views.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using Named = std::vector<std::pair<std::string, Tensor>>;

std::string GoldenDir() { return TY_GOLDEN_DIR; }

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file with `header` as its JSON header (unpadded) and `data` after it.
std::string MakeFile(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(uint64_t{header.size()} >> (8 * i));
  return out + header + data;
}

// The elements of `t` in row-major order, as raw bytes.
std::string Bytes(const Tensor& t) {
  Tensor c = ContiguousData(t);
  return std::string(static_cast<const char*>(c.raw_data()), t.numel() * ElementSize(t.dtype()));
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "safetensors_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << "mkdtemp " << tmpl;
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::vector<std::string> DirEntries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }
  // Loads `bytes` written to a file and returns the error (the load must fail).
  Status LoadError(const std::string& bytes) {
    WriteBytes(Path("bad.safetensors"), bytes);
    StatusOr<SafetensorsFile> f = LoadSafetensors(Path("bad.safetensors"));
    EXPECT_FALSE(f.ok()) << "loaded a corrupt file";
    if (f.ok()) return OkStatus();
    EXPECT_THAT(f.status().message(), HasSubstr("loading \"" + Path("bad.safetensors") + "\": "));
    return f.status();
  }

  std::string dir_;
};

using SafetensorsDeathTest = SafetensorsTest;

Named EveryDtype() {
  const float inf = std::numeric_limits<float>::infinity();
  return {
      {"f32", FromVector<float>({1.5f, -0.0f, inf, std::nanf(""), 1e-40f, -3e38f}, {2, 3})},
      {"f64", FromVector<double>({0.1, -1e300, 5e-324}, {3})},
      {"bf16",
       ConvertTo(FromVector<float>({1.0f, -2.5f, 3.14159f, 1e-3f}, {2, 2}), DType::kBFloat16)},
      {"f16", ConvertTo(FromVector<float>({0.5f, -65504.0f, 6e-8f}, {3}), DType::kFloat16)},
      {"i64", FromVector<int64_t>({std::numeric_limits<int64_t>::min(), 9007199254740993,
                                   std::numeric_limits<int64_t>::max()},
                                  {3, 1})},
      {"i32", FromVector<int32_t>({std::numeric_limits<int32_t>::min(), 0, 7}, {1, 3})},
      {"u8", FromVector<uint8_t>({0, 1, 128, 255}, {4})},
      {"bool", ConvertTo(FromVector<uint8_t>({1, 0, 0, 1, 1}, {5}), DType::kBool)},
      {"scalar", Scalar(2.75, Options(DType::kFloat64))},
      {"empty", Zeros({0, 3})},
      {"empty_middle", Zeros({2, 0, 4}, Options(DType::kInt32))},
  };
}

TEST_F(SafetensorsTest, RoundTripsEveryDtypeBitForBit) {
  const Named tensors = EveryDtype();
  ASSERT_TRUE(SaveSafetensors(Path("all.safetensors"), tensors).ok());
  StatusOr<SafetensorsFile> file = LoadSafetensors(Path("all.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, want] = tensors[i];
    const auto& [got_name, got] = file->tensors[i];
    EXPECT_EQ(got_name, name);  // file order is the order given
    EXPECT_EQ(got.dtype(), want.dtype()) << name;
    EXPECT_EQ(got.shape(), want.shape()) << name;
    EXPECT_TRUE(got.is_contiguous()) << name;
    EXPECT_EQ(Bytes(got), Bytes(want)) << name;
  }
  EXPECT_EQ(file->tensors[8].second.dim(), 0);
  EXPECT_EQ(file->tensors[8].second.item(), 2.75);
  EXPECT_TRUE(file->metadata.empty());
}

TEST_F(SafetensorsTest, WritesNonContiguousTensorsInLogicalOrder) {
  Tensor base = FromVector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor other = FromVector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  const Named tensors = {
      {"transposed", views::Transpose(base, 0, 1)},          // (3, 2), strides (1, 3)
      {"column", views::Select(other, 1, 2)},                // {2, 5}, offset 2
      {"expanded", views::Expand(Arange(3.0), {2, 3})},      // stride 0 on dim 0
      {"stepped", views::Slice(Arange(10.0), 0, 1, 10, 4)},  // {1, 5, 9}
  };
  Status saved = SaveSafetensors(Path("views.safetensors"), tensors);
  ASSERT_TRUE(saved.ok()) << saved;
  StatusOr<SafetensorsFile> file = LoadSafetensors(Path("views.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(ToVector<float>(file->tensors[0].second), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(file->tensors[0].second.shape(), (Shape{3, 2}));
  EXPECT_EQ(ToVector<float>(file->tensors[1].second), (std::vector<float>{2, 5}));
  EXPECT_EQ(ToVector<int64_t>(file->tensors[2].second), (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(ToVector<int64_t>(file->tensors[3].second), (std::vector<int64_t>{1, 5, 9}));
}

TEST_F(SafetensorsTest, KeepsMetadata) {
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"note", "quote \" backslash \\ newline \n \xE2\x9C\x93"}, {"", "empty"}};
  ASSERT_TRUE(SaveSafetensors(Path("m.safetensors"), {{"w", Ones({2})}}, metadata).ok());
  StatusOr<SafetensorsFile> file = LoadSafetensors(Path("m.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata, metadata);
  EXPECT_EQ(file->tensors.size(), 1u);
}

TEST_F(SafetensorsTest, WritesTheReferenceLayoutWithTheHeaderPaddedToEightBytes) {
  const Named tensors = {{"a", Ones({2})}, {"b", Zeros({1}, Options(DType::kUInt8))}};
  ASSERT_TRUE(SaveSafetensors(Path("p.safetensors"), tensors, {{"k", "v"}}).ok());
  const std::string bytes = ReadBytes(Path("p.safetensors"));
  const std::string header =
      R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"U8","shape":[1],"data_offsets":[8,9]}})";
  const std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  ASSERT_EQ(padded.size() % 8, 0u);
  ASSERT_NE(padded.size(), header.size());  // the case exercises padding
  EXPECT_EQ(bytes, MakeFile(padded, Bytes(tensors[0].second) + std::string(1, '\0')));
}

TEST_F(SafetensorsTest, ReplacesAnExistingFileAndLeavesNoTemporaryFile) {
  WriteBytes(Path("model.safetensors"), "old contents");
  ASSERT_TRUE(SaveSafetensors(Path("model.safetensors"), {{"w", Ones({3})}}).ok());
  EXPECT_EQ(DirEntries(), (std::vector<std::string>{"model.safetensors"}));
  StatusOr<SafetensorsFile> file = LoadSafetensors(Path("model.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(ToVector<float>(file->tensors[0].second), (std::vector<float>{1, 1, 1}));
}

TEST_F(SafetensorsTest, AFailedSaveLeavesTheExistingFileUntouched) {
  WriteBytes(Path("model.safetensors"), "old contents");
  // Rejected before writing.
  Status dup = SaveSafetensors(Path("model.safetensors"), {{"w", Ones({1})}, {"w", Ones({1})}});
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  // Failing to create the temporary file (a directory stands in its way).
  const std::string tmp = Path("model.safetensors.tmp." + std::to_string(getpid()));
  std::filesystem::create_directory(tmp);
  Status s = SaveSafetensors(Path("model.safetensors"), {{"w", Ones({1})}});
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("saving \"" + Path("model.safetensors") + "\": creating \"" +
                                     tmp + "\": Is a directory"));
  std::filesystem::remove(tmp);
  EXPECT_EQ(ReadBytes(Path("model.safetensors")), "old contents");
  EXPECT_EQ(DirEntries(), (std::vector<std::string>{"model.safetensors"}));
}

// Runs in a child process, which re-runs the test from the start ("threadsafe" death tests), so
// it has a temp dir of its own: files may grow to 1000 bytes only, so writing 64 KiB fails
// midway. Prints what it saw and exits 0 only when the save failed, the old file is intact and
// no temporary file is left.
void SaveWithFileSizeLimit(const std::string& dir, const std::string& path) {
  rlimit limit{1000, 1000};
  setrlimit(RLIMIT_FSIZE, &limit);
  std::signal(SIGXFSZ, SIG_IGN);
  Status s = SaveSafetensors(path, {{"w", Zeros({16384})}});
  const bool intact = ReadBytes(path) == "old contents";
  const int64_t entries = std::distance(std::filesystem::directory_iterator(dir), {});
  std::fprintf(stderr, "%s; old file intact: %d; files in dir: %d\n", s.ToString().c_str(), intact,
               static_cast<int>(entries));
  std::filesystem::remove_all(dir);
  std::exit(!s.ok() && intact && entries == 1 ? 0 : 1);
}

TEST_F(SafetensorsDeathTest, AWriteFailingMidwayRemovesTheTemporaryFile) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the test binary may run pool threads
  const std::string path = Path("model.safetensors");
  WriteBytes(path, "old contents");
  EXPECT_EXIT(SaveWithFileSizeLimit(dir_, path), ::testing::ExitedWithCode(0),
              "RESOURCE_EXHAUSTED: saving .*: writing .*File too large; old file intact: 1; "
              "files in dir: 1");
}

TEST_F(SafetensorsTest, RejectsRepeatedReservedAndUndefinedNames) {
  const std::string p = Path("x.safetensors");
  EXPECT_EQ(SaveSafetensors(p, {{"w", Ones({1})}, {"w", Zeros({2})}}).message(),
            "saving \"" + p + "\": tensor name \"w\" appears twice");
  EXPECT_THAT(SaveSafetensors(p, {{"__metadata__", Ones({1})}}).message(),
              HasSubstr("\"__metadata__\" is reserved"));
  EXPECT_THAT(SaveSafetensors(p, {{"u", Tensor()}}).message(),
              HasSubstr("tensor \"u\" is undefined"));
  EXPECT_EQ(DirEntries(), std::vector<std::string>{});
}

TEST_F(SafetensorsTest, RejectsTensorsSharingMemory) {
  const std::string p = Path("x.safetensors");
  Tensor base = Arange(10.0);
  Status same = SaveSafetensors(p, {{"a", base}, {"tied", base}});
  EXPECT_EQ(same.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(same.message(), HasSubstr("tensors \"a\" and \"tied\" share memory"));
  Status overlap = SaveSafetensors(
      p, {{"head", views::Slice(base, 0, 0, 6)}, {"mid", views::Slice(base, 0, 4, 8)}});
  EXPECT_THAT(overlap.message(), HasSubstr("tensors \"head\" and \"mid\" share memory"));
  // A strided view whose span covers another view's elements counts as sharing too.
  Status strided = SaveSafetensors(
      p, {{"x", views::Slice(base, 0, 5, 6)}, {"every4", views::Slice(base, 0, 0, 10, 4)}});
  EXPECT_THAT(strided.message(), HasSubstr("share memory"));
  EXPECT_EQ(DirEntries(), std::vector<std::string>{});
  // Disjoint parts of one storage are separate tensors; a copy is fine as well.
  ASSERT_TRUE(SaveSafetensors(p, {{"lo", views::Slice(base, 0, 0, 5)},
                                  {"hi", views::Slice(base, 0, 5, 10)},
                                  {"copy", ConvertTo(base, base.dtype(), true)}})
                  .ok());
  StatusOr<SafetensorsFile> file = LoadSafetensors(p);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(ToVector<int64_t>(file->tensors[1].second), (std::vector<int64_t>{5, 6, 7, 8, 9}));
}

TEST_F(SafetensorsTest, MissingOrUnreadablePathsAreClearErrors) {
  StatusOr<SafetensorsFile> missing = LoadSafetensors(Path("nope.safetensors"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "loading \"" + Path("nope.safetensors") +
                                            "\": cannot open the file: No such file or directory");
  EXPECT_THAT(LoadSafetensors(dir_).status().message(), HasSubstr("not a regular file"));
  Status no_dir = SaveSafetensors(Path("no/such/dir/x.safetensors"), {{"w", Ones({1})}});
  EXPECT_EQ(no_dir.code(), StatusCode::kNotFound);
  EXPECT_THAT(no_dir.message(), HasSubstr("No such file or directory"));
}

TEST_F(SafetensorsTest, TruncatedFilesAreClearErrors) {
  ASSERT_TRUE(SaveSafetensors(Path("good.safetensors"), {{"w", Ones({4})}}).ok());
  const std::string good = ReadBytes(Path("good.safetensors"));
  Status s = LoadError(good.substr(0, 5));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("the file is 5 bytes, too short for the 8-byte header"));
  s = LoadError(good.substr(0, 30));
  EXPECT_THAT(s.message(),
              HasSubstr("header length 56 goes beyond the end of the file (30 bytes)"));
  s = LoadError(good.substr(0, good.size() - 3));
  EXPECT_THAT(s.message(), HasSubstr("tensor \"w\": data_offsets [0, 16] go beyond the end of the "
                                     "data (13 bytes after the header); the file is truncated"));
  s = LoadError(std::string(8, '\xff') + "{}");
  EXPECT_THAT(s.message(), HasSubstr("header length 18446744073709551615 is above the limit"));
}

TEST_F(SafetensorsTest, FlippedHeaderBytesAreClearErrors) {
  ASSERT_TRUE(SaveSafetensors(Path("good.safetensors"), {{"w", Ones({4})}}).ok());
  const std::string good = ReadBytes(Path("good.safetensors"));
  std::string flipped = good;
  flipped[8] = 'x';  // the opening '{'
  Status s = LoadError(flipped);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("the header is not valid: invalid json at line 1, column 1: "
                                     "expected a value, got 'x'"));
  flipped = good;
  flipped[good.find("F32")] = 'Q';
  s = LoadError(flipped);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(),
              HasSubstr("tensor \"w\": dtype \"Q32\" is not supported; supported: F32"));
  flipped = good;
  flipped[good.find("[4]") + 1] = '5';
  s = LoadError(flipped);
  EXPECT_THAT(s.message(), HasSubstr("tensor \"w\": shape [5] of F32 needs 20 bytes, but "
                                     "data_offsets [0, 16] hold 16"));
  flipped = good;
  flipped[good.find("dtype")] = '\x01';
  EXPECT_THAT(LoadError(flipped).message(), HasSubstr("raw control character byte 0x01"));
}

struct CorruptCase {
  const char* what;
  std::string header;
  std::string data;
  StatusCode code;
  std::string message;
};

TEST_F(SafetensorsTest, InvalidHeadersAndLayoutsAreClearErrors) {
  const std::string f32x2 = R"("dtype":"F32","shape":[2],"data_offsets":)";
  const std::string d8(8, '\0');
  const std::vector<CorruptCase> cases = {
      {"empty header", "", "", StatusCode::kDataLoss, "expected a value, got end of input"},
      {"not an object", "[1]", "", StatusCode::kDataLoss, "the header is not a json object"},
      {"entry not an object", R"({"w":3})", "", StatusCode::kDataLoss,
       "tensor \"w\": expected an object with dtype, shape and data_offsets, got 3"},
      {"missing dtype", R"({"w":{"shape":[],"data_offsets":[0,4]}})", d8, StatusCode::kDataLoss,
       "tensor \"w\": field \"dtype\" is missing"},
      {"shape of wrong type", R"({"w":{"dtype":"F32","shape":"2x3","data_offsets":[0,4]}})", d8,
       StatusCode::kDataLoss, "tensor \"w\": field \"shape\": expected an array, got string"},
      {"known but unsupported dtype", R"({"w":{"dtype":"I16","shape":[4],"data_offsets":[0,8]}})",
       d8, StatusCode::kUnimplemented, "dtype \"I16\" is not supported"},
      {"negative size", R"({"w":{"dtype":"U8","shape":[2,-1],"data_offsets":[0,0]}})", "",
       StatusCode::kDataLoss, "shape [2, -1] has a negative size"},
      {"too many dims", R"({"w":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})",
       "x", StatusCode::kUnimplemented, "shape has 9 dimensions; trainyard tensors have at most 8"},
      {"one offset", "{\"w\":{" + f32x2 + "[8]}}", d8, StatusCode::kDataLoss,
       "data_offsets [8] must be [begin, end] with 0 <= begin <= end"},
      {"reversed offsets", "{\"w\":{" + f32x2 + "[8,0]}}", d8, StatusCode::kDataLoss,
       "data_offsets [8, 0] must be"},
      {"out of range", "{\"w\":{" + f32x2 + "[8,16]}}", d8, StatusCode::kDataLoss,
       "data_offsets [8, 16] go beyond the end of the data (8 bytes after the header)"},
      {"overlap", "{\"a\":{" + f32x2 + "[0,8]},\"b\":{" + f32x2 + "[4,12]}}", d8 + d8,
       StatusCode::kDataLoss, "tensors \"a\" [0, 8] and \"b\" [4, 12] overlap in the data"},
      {"gap", "{\"a\":{" + f32x2 + "[0,8]},\"b\":{" + f32x2 + "[12,20]}}", d8 + d8 + "1234",
       StatusCode::kDataLoss, "data bytes [8, 12) belong to no tensor"},
      {"trailing bytes", "{\"a\":{" + f32x2 + "[0,8]}}", d8 + "xyz", StatusCode::kDataLoss,
       "3 trailing bytes after the last tensor (tensors end at 8, the data has 11 bytes)"},
      {"duplicate name", "{\"a\":{" + f32x2 + "[0,8]},\"a\":{" + f32x2 + "[8,16]}}", d8 + d8,
       StatusCode::kDataLoss, "line 1, column 55: duplicate key \"a\""},
      {"metadata not strings", R"({"__metadata__":{"epoch":3}})", "", StatusCode::kDataLoss,
       "\"__metadata__\" value of \"epoch\" is 3, not a string"},
      {"bool byte", R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
       std::string("\x01\x00\x02", 3), StatusCode::kDataLoss,
       "tensor \"m\": element 2 is byte 2; bool elements must be 0 or 1"},
  };
  for (const CorruptCase& c : cases) {
    SCOPED_TRACE(c.what);
    Status s = LoadError(MakeFile(c.header, c.data));
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

TEST_F(SafetensorsTest, LoadsHeadersThatTheReferenceAccepts) {
  // Unpadded header, extra fields in an entry, tensors listed out of data order, two empty
  // tensors at one offset: the header order is what LoadSafetensors returns.
  const std::string header = R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6],"extra":true},)"
                             R"("e1":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                             R"("e2":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]},)"
                             R"("a":{"dtype":"I32","shape":[],"data_offsets":[0,4]}})";
  WriteBytes(Path("ok.safetensors"), MakeFile(header, std::string("\x07\0\0\0\x01\x02", 6)));
  StatusOr<SafetensorsFile> file = LoadSafetensors(Path("ok.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), 4u);
  EXPECT_EQ(file->tensors[0].first, "b");
  EXPECT_EQ(ToVector<uint8_t>(file->tensors[0].second), (std::vector<uint8_t>{1, 2}));
  EXPECT_EQ(file->tensors[2].second.shape(), (Shape{0, 5}));
  EXPECT_EQ(file->tensors[3].first, "a");
  EXPECT_EQ(file->tensors[3].second.item(), 7);
}

// ---- Interoperability with the Python safetensors package (tests/golden) ----

TEST(SafetensorsInteropTest, LoadsTheFileTorchWroteWithTheExpectedValues) {
  const std::string fixture = GoldenDir() + "/torch_written.safetensors";
  StatusOr<Json> expected = Json::Parse(ReadBytes(GoldenDir() + "/torch_written.json"));
  ASSERT_TRUE(expected.ok()) << expected.status() << " (run from the source tree?)";
  StatusOr<SafetensorsFile> file = LoadSafetensors(fixture);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata, (std::map<std::string, std::string>{
                                {"source", *expected->Get<std::string>("metadata.source")}}));
  const Json& want = *expected->Find("tensors");
  ASSERT_EQ(file->tensors.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& [name, t] = file->tensors[i];
    SCOPED_TRACE(name);
    EXPECT_EQ(name, *want[i].Get<std::string>("name"));
    const std::string dtype = *want[i].Get<std::string>("dtype");
    const std::map<std::string, DType> codes = {
        {"F32", DType::kFloat32}, {"F64", DType::kFloat64}, {"BF16", DType::kBFloat16},
        {"F16", DType::kFloat16}, {"I64", DType::kInt64},   {"I32", DType::kInt32},
        {"U8", DType::kUInt8},    {"BOOL", DType::kBool}};
    EXPECT_EQ(t.dtype(), codes.at(dtype));
    EXPECT_EQ(t.shape(), Shape(*want[i].Get<std::vector<int64_t>>("shape")));
    if (IsFloating(t.dtype())) {  // expected values are the exact doubles of the elements
      EXPECT_EQ(ToVector<double>(t), *want[i].Get<std::vector<double>>("values"));
    } else {
      EXPECT_EQ(ToVector<int64_t>(t), *want[i].Get<std::vector<int64_t>>("values"));
    }
  }
}

TEST(SafetensorsInteropTest, SavingTheTorchTensorsAgainReproducesTheFileByteForByte) {
  const std::string fixture = GoldenDir() + "/torch_written.safetensors";
  StatusOr<SafetensorsFile> file = LoadSafetensors(fixture);
  ASSERT_TRUE(file.ok()) << file.status();
  std::string out = ::testing::TempDir() + "cpp_written." + std::to_string(getpid());
  ASSERT_TRUE(SaveSafetensors(out, file->tensors, file->metadata).ok());
  EXPECT_EQ(ReadBytes(out), ReadBytes(fixture));
  std::filesystem::remove(out);
  // By hand: TY_SAFETENSORS_EXPORT=FILE, then make_safetensors_fixture.py --check FILE loads
  // the C++-written file in Python.
  if (const char* export_path = std::getenv("TY_SAFETENSORS_EXPORT")) {
    ASSERT_TRUE(SaveSafetensors(export_path, file->tensors, file->metadata).ok());
  }
}

}  // namespace
}  // namespace trainyard
