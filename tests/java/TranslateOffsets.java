// MirrorMaker 2's own client reading our checkpoints: RemoteClusterUtils.translateOffsets.
// Usage: java -cp <kafka jars> TranslateOffsets.java <bootstrap> <source alias> <group>
import java.time.Duration;
import java.util.Map;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class TranslateOffsets {
    public static void main(String[] args) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> out = RemoteClusterUtils.translateOffsets(
            Map.of("bootstrap.servers", args[0]), args[1], args[2], Duration.ofSeconds(60));
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : out.entrySet()) {
            System.out.println(e.getKey().topic() + " " + e.getKey().partition() + " " + e.getValue().offset());
        }
    }
}
