// Avro's own schema-resolution check, the rule Confluent's and Apicurio's registries apply for
// BACKWARD compatibility: can a reader with the newer schema read data written with the older?
// Reads a JSON array of schema strings (oldest first) on stdin; prints one line per consecutive
// pair, "ok" or "incompatible: <what and where>"; exit 0 either way (the caller decides).
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
import org.apache.avro.Schema;
import org.apache.avro.SchemaCompatibility;
import com.fasterxml.jackson.databind.ObjectMapper;

public class AvroBackward {
    public static void main(String[] args) throws Exception {
        String in = new String(System.in.readAllBytes(), StandardCharsets.UTF_8);
        List<?> texts = new ObjectMapper().readValue(in, List.class);
        Schema prev = null;
        for (Object t : texts) {
            Schema s = new Schema.Parser().parse((String) t);
            if (prev != null) {
                SchemaCompatibility.SchemaPairCompatibility c =
                    SchemaCompatibility.checkReaderWriterCompatibility(s, prev);
                if (c.getType() == SchemaCompatibility.SchemaCompatibilityType.COMPATIBLE) {
                    System.out.println("ok");
                } else {
                    StringBuilder why = new StringBuilder();
                    for (SchemaCompatibility.Incompatibility i : c.getResult().getIncompatibilities()) {
                        why.append(i.getType()).append(" at ").append(i.getLocation()).append(" (")
                           .append(i.getMessage()).append("); ");
                    }
                    System.out.println("incompatible: " + why);
                }
            }
            prev = s;
        }
    }
}
