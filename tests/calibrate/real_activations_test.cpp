// The shipped CPU profile's ratio model against real activations (tests/data/activations,
// written by make_activations.py from torchvision's resnet18 and a GELU transformer layer):
// predicted from each tensor's own features, the szp ratio must be within the error the fit
// reported on its held-back synthetic samples, at relative error bounds 1e-4, 1e-3 and 1e-2.
// Nothing is fitted on these tensors: the profile comes from `comptrain calibrate` on synthetic
// families only (calibrate/README.md, "Real activations").

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "comptrain/models/profile_yaml.hpp"
#include "comptrain/calibrate/samples.hpp"
#include "comptrain/kernels/array_io.hpp"
#include "comptrain/kernels/codec.hpp"
#include "comptrain/support/atomic_file.hpp"

namespace comptrain::calibrate {
namespace {

TEST(RealActivations, RatioModelWithinItsReportedError) {
  const std::string dir = std::string(COMPTRAIN_TEST_DATA_DIR) + "/activations/";
  std::ifstream index(dir + "index.txt");
  ASSERT_TRUE(index) << dir << "index.txt";
  const auto profile = models::builtin_profile("cpu-epyc-2core");
  const models::CodecProfile& szp = *profile.find("szp");
  std::string line;
  int checked = 0;
  while (std::getline(index, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string file, class_name;
    fields >> file >> class_name;
    const auto cls = models::parse_tensor_class(class_name);
    ASSERT_TRUE(cls) << line;
    const auto array = kernels::parse_npy(read_file(dir + file), file);
    const models::RatioModel& model = szp.ratio_model(*cls);
    const models::DataFeatures features = features_of(array.values);
    for (double eb : {1e-4, 1e-3, 1e-2}) {
      kernels::CompressOptions o;
      o.codec = kernels::CodecId::szp;
      o.eb = eb;
      o.mode = kernels::BoundMode::rel;
      const auto stream = kernels::compress(array.values, array.shape, o);
      const double actual = static_cast<double>(array.values.size() * sizeof(float)) / static_cast<double>(stream.size());
      const double predicted = model.ratio(eb, features);
      const double error = std::fabs(predicted - actual) / actual;
      EXPECT_LE(error, model.heldout_max_relative_error)
          << file << " (" << class_name << ") at eb " << eb << ": actual " << actual << ", predicted " << predicted;
      std::printf("%-26s %-10s eb %-6g actual %6.3f predicted %6.3f error %5.1f %% (held-back max %5.1f %%)\n", file.c_str(),
                  class_name.c_str(), eb, actual, predicted, 100 * error, 100 * model.heldout_max_relative_error);
    }
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

}  // namespace
}  // namespace comptrain::calibrate
