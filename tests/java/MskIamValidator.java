// A Kafka broker's OAUTHBEARER validator that checks AWS MSK IAM tokens the way MSK does its part
// of it: the token is a base64url SigV4-presigned `kafka-cluster:Connect` URL, signed by the key id
// and secret the broker is given, not expired. For tests only
// (tests/test_msk_iam.py): Apache Kafka knows no IAM, so the broker here verifies the signature
// itself, independently of lakestream's signer. The key id and secret are the broker settings
// `msk.iam.test.key.id` / `msk.iam.test.secret`.
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.*;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import javax.security.auth.callback.Callback;
import javax.security.auth.callback.UnsupportedCallbackException;
import javax.security.auth.login.AppConfigurationEntry;
import org.apache.kafka.common.security.auth.AuthenticateCallbackHandler;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerExtensionsValidatorCallback;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerToken;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallback;

public class MskIamValidator implements AuthenticateCallbackHandler {
    private String keyId, secret;
    public static volatile int accepted = 0;

    @Override
    public void configure(Map<String, ?> configs, String mechanism, List<AppConfigurationEntry> jaas) {
        keyId = String.valueOf(configs.get("msk.iam.test.key.id"));
        secret = String.valueOf(configs.get("msk.iam.test.secret"));
    }

    @Override
    public void close() {}

    @Override
    public void handle(Callback[] callbacks) throws UnsupportedCallbackException {
        for (Callback c : callbacks) {
            if (c instanceof OAuthBearerValidatorCallback v) {
                try {
                    v.token(check(v.tokenValue()));
                } catch (Exception e) {
                    System.err.println("MSK IAM token refused: " + e.getMessage());
                    v.error("invalid_token", null, null);
                }
            } else if (c instanceof OAuthBearerExtensionsValidatorCallback x) {
                x.inputExtensions().map().keySet().forEach(x::valid);
            } else {
                throw new UnsupportedCallbackException(c);
            }
        }
    }

    private OAuthBearerToken check(String token) throws Exception {
        String url = new String(Base64.getUrlDecoder().decode(token), StandardCharsets.UTF_8);
        if (!url.startsWith("https://")) throw new Exception("not a URL");
        String host = url.substring(8, url.indexOf("/?"));
        Map<String, String> q = new TreeMap<>();
        String sig = null, date = null, credential = null, expires = null, action = null;
        for (String kv : url.substring(url.indexOf("/?") + 2).split("&")) {
            String[] p = kv.split("=", 2);
            String k = p[0], val = p.length > 1 ? p[1] : "";
            switch (k) {
                case "X-Amz-Signature" -> sig = val;
                case "User-Agent" -> {}
                default -> q.put(k, val);
            }
            String dec = URLDecoder.decode(val, StandardCharsets.UTF_8);
            if (k.equals("X-Amz-Date")) date = dec;
            if (k.equals("X-Amz-Credential")) credential = dec;
            if (k.equals("X-Amz-Expires")) expires = dec;
            if (k.equals("Action")) action = dec;
        }
        if (!"kafka-cluster:Connect".equals(action)) throw new Exception("action " + action);
        String[] scope = credential.split("/", 2);
        if (!scope[0].equals(keyId)) throw new Exception("key id " + scope[0]);
        String[] s = scope[1].split("/");  // date/region/service/aws4_request
        if (!s[2].equals("kafka-cluster") || !s[3].equals("aws4_request")) throw new Exception("scope " + scope[1]);
        Instant signed = DateTimeFormatter.ofPattern("yyyyMMdd'T'HHmmss'Z'").withZone(ZoneOffset.UTC).parse(date, Instant::from);
        Instant until = signed.plusSeconds(Long.parseLong(expires));
        if (Instant.now().isAfter(until)) throw new Exception("expired at " + until);
        StringJoiner cq = new StringJoiner("&");
        q.forEach((k, v) -> cq.add(k + "=" + v));
        String canonical = "GET\n/\n" + cq + "\nhost:" + host + "\n\nhost\n" + hex(sha256(""));
        String toSign = "AWS4-HMAC-SHA256\n" + date + "\n" + scope[1] + "\n" + hex(sha256(canonical));
        byte[] key = hmac(("AWS4" + secret).getBytes(StandardCharsets.UTF_8), s[0]);
        for (String part : new String[] {s[1], s[2], s[3]}) key = hmac(key, part);
        String want = hex(hmac(key, toSign));
        if (!want.equals(sig)) throw new Exception("signature does not match");
        accepted++;
        long start = signed.toEpochMilli(), life = until.toEpochMilli();
        return new OAuthBearerToken() {
            public String value() { return token; }
            public Set<String> scope() { return Collections.emptySet(); }
            public long lifetimeMs() { return life; }
            public String principalName() { return keyId; }
            public Long startTimeMs() { return start; }
        };
    }

    private static byte[] sha256(String s) throws Exception {
        return MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8));
    }

    private static byte[] hmac(byte[] key, String data) throws Exception {
        Mac m = Mac.getInstance("HmacSHA256");
        m.init(new SecretKeySpec(key, "HmacSHA256"));
        return m.doFinal(data.getBytes(StandardCharsets.UTF_8));
    }

    private static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder();
        for (byte x : b) sb.append(String.format("%02x", x));
        return sb.toString();
    }
}
