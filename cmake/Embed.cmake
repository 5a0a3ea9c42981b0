# Turns a file into a C++ source defining `std::string_view pd2bw::cli::SYMBOL()` with its bytes.
file(READ "${INPUT}" _hex HEX)
string(LENGTH "${_hex}" _len)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," _bytes "${_hex}")
math(EXPR _n "${_len} / 2")
file(WRITE "${OUTPUT}"
  "// Generated from ${INPUT} by cmake/Embed.cmake; do not edit.\n"
  "#include <string_view>\n"
  "namespace pd2bw::cli {\n"
  "static const char k_data[] = {${_bytes} 0};\n"
  "std::string_view ${SYMBOL}() { return std::string_view(k_data, ${_n}); }\n"
  "}\n")
