package keel.sdks;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

final class Util {
  static final byte[] JSON_NULL = "null".getBytes(StandardCharsets.UTF_8);
  private static final ObjectMapper MAPPER = new ObjectMapper();
  private static final Map<String, Integer> COUNTERS = new ConcurrentHashMap<>();

  private Util() {}

  static int bump(String name) {
    return COUNTERS.merge(name, 1, Integer::sum);
  }

  static void record(String line) {
    String file = System.getenv("RECORD_FILE");
    if (file == null || file.isEmpty()) return;
    try {
      Files.write(
          Path.of(file),
          (line + "\n").getBytes(StandardCharsets.UTF_8),
          StandardOpenOption.CREATE,
          StandardOpenOption.APPEND);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  static byte[] json(JsonNode value) {
    try {
      return MAPPER.writeValueAsBytes(value);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
