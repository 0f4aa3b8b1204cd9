// python::parse_float against Python's float() of the same texts (the fixture's "floats"): the doubles
// either side of the largest and the smallest, halfway cases, long mantissas, and what is no number.
#include <gtest/gtest.h>

#include "text/a1111_fixture.h"
#include "text/python_float.h"

TEST(PythonFloat, MatchesPython) {
    const nlohmann::json& cases = kiln::test::a1111_fixture().at("floats");
    ASSERT_GT(cases.size(), 40u);
    for (const nlohmann::json& c : cases) {
        const std::string text = c.at("text").get<std::string>();
        SCOPED_TRACE("text: " + text.substr(0, 60));
        const std::optional<double> got = kiln::python::parse_float(text);
        if (c.contains("error")) {
            EXPECT_FALSE(got.has_value()) << *got;
            continue;
        }
        ASSERT_TRUE(got.has_value());
        const double want = kiln::test::fixture_double(c.at("value"));
        EXPECT_TRUE(kiln::test::same_double(*got, want)) << *got << " vs " << want;
    }
}
