#include "shoal/fl/flower/fab.h"

#include <zlib.h>

#include <cstdint>
#include <cstring>

#include "shoal/common/file_io.h"
#include "shoal/fl/flower/objects.h"

namespace shoal::flower {

namespace {

uint32_t Le(std::string_view b, size_t at, int n) {
  uint32_t v = 0;
  for (int i = 0; i < n; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(b[at + i])) << (8 * i);
  return v;
}

// One member of the zip, inflated (stored or deflate).
Result<std::string> ZipMember(std::string_view zip, std::string_view name) {
  if (zip.size() < 22) return InvalidArgument("not a zip file");
  size_t eocd = std::string_view::npos;
  for (size_t i = zip.size() - 22 + 1; i-- > 0 && zip.size() - i < 22 + 65536;) {
    if (Le(zip, i, 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd == std::string_view::npos) return InvalidArgument("not a zip file (no end record)");
  const uint32_t entries = Le(zip, eocd + 10, 2);
  size_t at = Le(zip, eocd + 16, 4);
  for (uint32_t e = 0; e < entries; ++e) {
    if (at + 46 > zip.size() || Le(zip, at, 4) != 0x02014b50) {
      return InvalidArgument("zip: bad central directory");
    }
    const uint32_t method = Le(zip, at + 10, 2);
    const uint32_t csize = Le(zip, at + 20, 4);
    const uint32_t usize = Le(zip, at + 24, 4);
    const uint32_t nlen = Le(zip, at + 28, 2), xlen = Le(zip, at + 30, 2),
                   clen = Le(zip, at + 32, 2);
    const uint32_t local = Le(zip, at + 42, 4);
    if (at + 46 + nlen > zip.size()) return InvalidArgument("zip: bad central directory");
    const std::string_view entry = zip.substr(at + 46, nlen);
    at += 46 + nlen + xlen + clen;
    if (entry != name) continue;
    if (local + 30 > zip.size() || Le(zip, local, 4) != 0x04034b50) {
      return InvalidArgument("zip: bad local header");
    }
    const size_t data = local + 30 + Le(zip, local + 26, 2) + Le(zip, local + 28, 2);
    if (data + csize > zip.size() || usize > (64u << 20)) return InvalidArgument("zip: bad member");
    const std::string_view comp = zip.substr(data, csize);
    if (method == 0) return std::string(comp);
    if (method != 8) return InvalidArgument("zip: compression method " + std::to_string(method));
    std::string out(usize, '\0');
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return Internal("zlib: inflateInit2");
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(comp.data()));
    z.avail_in = static_cast<uInt>(comp.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    const int rc = inflate(&z, Z_FINISH);
    inflateEnd(&z);
    if (rc != Z_STREAM_END) return InvalidArgument("zip: member does not inflate");
    return out;
  }
  return InvalidArgument("no " + std::string(name) + " in the bundle");
}

// `key = "value"` inside `[table]` of a TOML text (the few keys a FAB's pyproject needs).
std::string TomlString(std::string_view toml, std::string_view table, std::string_view key) {
  std::string_view current;
  size_t pos = 0;
  while (pos < toml.size()) {
    size_t end = toml.find('\n', pos);
    if (end == std::string_view::npos) end = toml.size();
    std::string_view line = toml.substr(pos, end - pos);
    pos = end + 1;
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.starts_with("[")) {
      current = line.substr(1, line.find(']') == std::string_view::npos ? 0 : line.find(']') - 1);
      continue;
    }
    if (current != table || !line.starts_with(key)) continue;
    std::string_view rest = line.substr(key.size());
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    if (!rest.starts_with("=")) continue;
    rest.remove_prefix(1);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    if (rest.size() < 2 || (rest.front() != '"' && rest.front() != '\'')) continue;
    const char q = rest.front();
    const size_t close = rest.find(q, 1);
    if (close == std::string_view::npos) continue;
    return std::string(rest.substr(1, close - 1));
  }
  return {};
}

}  // namespace

Result<AppBundle> ParseFab(std::string bytes) {
  auto toml = ZipMember(bytes, "pyproject.toml");
  if (!toml.ok()) return InvalidArgument("FAB: " + toml.status().message());
  AppBundle fab;
  const std::string name = TomlString(*toml, "project", "name");
  fab.version = TomlString(*toml, "project", "version");
  const std::string publisher = TomlString(*toml, "tool.flwr.app", "publisher");
  if (name.empty() || fab.version.empty() || publisher.empty()) {
    return InvalidArgument(
        "FAB: pyproject.toml needs project.name, project.version and tool.flwr.app.publisher");
  }
  fab.fab_id = publisher + "/" + name;
  fab.hash = ObjectId(bytes);
  fab.bytes = std::make_shared<const std::string>(std::move(bytes));
  return fab;
}

Result<AppBundle> LoadFab(const std::string& path) {
  auto bytes = ReadFileBytes(path);
  if (!bytes) return NotFound("FAB " + path + ": cannot be read");
  return ParseFab(std::move(*bytes));
}

}  // namespace shoal::flower
